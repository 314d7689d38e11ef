# A container class with __len__, __iter__, __contains__ and __getitem__.
class Inbox:
    def __init__(self):
        self.items = []

    def add(self, message_id):
        self.items.append(message_id)

    def __len__(self):
        return len(self.items)

    def __iter__(self):
        return iter(self.items)

    def __contains__(self, item):
        return item in self.items

    def __getitem__(self, index):
        return self.items[index]


inbox = Inbox()
for contact in call("crm.search_contacts", query="example")["value"]:
    inbox.add(unwrap(send_email(to=contact["email"], subject="Survey", body="2 minutes?"))["message_id"])
{"count": len(inbox), "first": inbox[0], "has_first": inbox[0] in inbox, "all": [m for m in inbox]}
