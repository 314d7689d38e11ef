# A class with @property, @staticmethod and @classmethod over tool data.
class Invoice:
    TAX = 0.2

    def __init__(self, data):
        self.data = data

    @property
    def gross(self):
        return round(self.data["amount"] * (1 + self.TAX), 2)

    @staticmethod
    def is_large(amount):
        return amount > 1000

    @classmethod
    def load_all(cls, customer_id):
        return [cls(d) for d in unwrap(list_invoices(customer_id=customer_id))]


invoices = Invoice.load_all("c4")
[(i.data["id"], i.gross, Invoice.is_large(i.gross)) for i in invoices]
