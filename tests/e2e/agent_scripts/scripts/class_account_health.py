# A small plain class that scores account health from several tools.
class Account:
    def __init__(self, customer, contract, open_issues):
        self.customer = customer
        self.contract = contract
        self.open_issues = open_issues

    def score(self):
        points = 100 - 15 * len(self.open_issues)
        if self.contract is None:
            points -= 40
        elif not self.contract["auto_renew"]:
            points -= 10
        return max(points, 0)

    def __repr__(self):
        return f"Account({self.customer['name']!r}, score={self.score()})"

    def __lt__(self, other):
        return self.score() < other.score()


accounts = []
for c in unwrap(list_customers(tier="enterprise")) + unwrap(list_customers(tier="growth")):
    customer = unwrap(get_customer(customer_id=c["id"]))
    contract = get_contract(customer_id=c["id"])
    issues = unwrap(list_issues(opened_after="2026-11-01", status="open", customer_id=c["id"]))
    accounts.append(Account(customer, contract["value"] if contract["ok"] else None, issues))
accounts.sort()
print(accounts[0], accounts[-1])
[(a.customer["id"], a.score()) for a in accounts]
