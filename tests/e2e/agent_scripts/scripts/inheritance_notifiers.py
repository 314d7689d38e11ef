# Notifiers with a base class and subclasses that override a method.
class Notifier:
    def __init__(self, to):
        self.to = to

    def subject(self, issue):
        return f"[{issue['priority']}] {issue['title']}"

    def send(self, issue):
        return unwrap(send_email(to=self.to, subject=self.subject(issue), body=issue["id"]))["message_id"]


class UrgentNotifier(Notifier):
    def subject(self, issue):
        return "URGENT " + super().subject(issue)


notifiers = {"p1": UrgentNotifier("oncall@example.com"), "p2": Notifier("support@example.com")}
sent = []
for issue in unwrap(list_issues(opened_after="2026-11-26", status="open")):
    notifier = notifiers.get(issue["priority"])
    if notifier:
        sent.append(notifier.send(issue))
sent
