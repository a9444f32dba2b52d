from datetime import date
from decimal import Decimal

import pytest

from ledgerly import Ledger, LedgerError, Money, Transaction


def usd(x):
    return Money(Decimal(x), "USD")


def test_post_and_balance():
    ledger = Ledger()
    ledger.post(Transaction(date(2024, 1, 2), "rent").add("expenses:rent", usd("900")).add("assets:bank", usd("-900")))
    assert ledger.balance("assets:bank", "USD") == usd("-900")


def test_unbalanced_transaction_is_refused():
    with pytest.raises(LedgerError):
        Ledger().post(Transaction(date(2024, 1, 2), "oops").add("a", usd("1")).add("b", usd("2")))


def test_closed_period():
    ledger = Ledger()
    ledger.close_period(date(2024, 1, 31))
    with pytest.raises(LedgerError):
        ledger.post(Transaction(date(2024, 1, 15), "late").add("a", usd("1")).add("b", usd("-1")))
