"""ledgerly: double-entry bookkeeping with exact money arithmetic."""
from ledgerly.ledger import Entry, Ledger, LedgerError, Transaction
from ledgerly.money import Money, parse_money

__all__ = ["Entry", "Ledger", "LedgerError", "Money", "Transaction", "parse_money"]
