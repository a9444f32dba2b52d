"""A ledger of balanced transactions between named accounts."""
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import date

from ledgerly.money import Money


class LedgerError(Exception):
    """An invalid transaction or query."""


@dataclass(frozen=True)
class Entry:
    account: str
    amount: Money  # positive: debit, negative: credit


@dataclass
class Transaction:
    when: date
    memo: str
    entries: list = field(default_factory=list)

    def add(self, account, amount):
        self.entries.append(Entry(account, amount))
        return self

    def is_balanced(self):
        totals = defaultdict(lambda: 0)
        for entry in self.entries:
            totals[entry.amount.currency] += entry.amount.amount
        return all(v == 0 for v in totals.values())


class Ledger:
    """Posted transactions, in posting order."""

    def __init__(self, name="main"):
        self.name = name
        self._transactions = []
        self._closed_until = None

    def __len__(self):
        return len(self._transactions)

    def post(self, transaction):
        if len(transaction.entries) < 2:
            raise LedgerError("a transaction needs at least two entries")
        if not transaction.is_balanced():
            raise LedgerError(f"transaction {transaction.memo!r} does not balance")
        if self._closed_until is not None and transaction.when <= self._closed_until:
            raise LedgerError(f"period up to {self._closed_until} is closed")
        self._transactions.append(transaction)
        return transaction

    def entries_for(self, account):
        for transaction in self._transactions:
            for entry in transaction.entries:
                if entry.account == account:
                    yield transaction.when, entry

    def balance(self, account, currency, until=None):
        total = Money.zero(currency)
        for when, entry in self.entries_for(account):
            if until is not None and when > until:
                continue
            total = total + entry.amount
        return total

    def accounts(self):
        return sorted({e.account for t in self._transactions for e in t.entries})

    def close_period(self, until):
        """Refuses further postings dated on or before ``until``."""
        if self._closed_until is not None and until < self._closed_until:
            raise LedgerError("cannot reopen a closed period")
        self._closed_until = until
