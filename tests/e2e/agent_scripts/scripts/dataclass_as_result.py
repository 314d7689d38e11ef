# The script's result is a dataclass instance (Tether returns the dict of its fields).
from dataclasses import dataclass


@dataclass
class Forecast:
    city: str
    temp_c: float
    condition: str
    advice: str


weather = unwrap(get_weather(city="Oslo", date="2026-12-01"))
advice = "bring a coat" if weather["temp_c"] < 5 else "no coat needed"
Forecast(weather["city"], weather["temp_c"], weather["condition"], advice)
