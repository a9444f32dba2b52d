"""Plain-text reports."""
from ledgerly.money import Money


def _pad(text, width, align):
    return text.rjust(width) if align == "right" else text.ljust(width)


def format_table(headers, rows, aligns=None):
    """A fixed-width table; ``aligns`` holds "left" or "right" per column."""
    aligns = aligns or ["left"] * len(headers)
    widths = [len(h) for h in headers]
    for row in rows:
        for i, cell in enumerate(row):
            widths[i] = max(widths[i], len(cell))
    lines = ["  ".join(_pad(h, w, a) for h, w, a in zip(headers, widths, aligns))]
    lines.append("  ".join("-" * w for w in widths))
    for row in rows:
        lines.append("  ".join(_pad(c, w, a) for c, w, a in zip(row, widths, aligns)))
    return "\n".join(lines)


class TrialBalance:
    """Debit and credit totals of every account of a ledger."""

    columns = ("Account", "Credit", "Debit")
    aligns = ("left", "right", "right")

    def __init__(self, ledger, currency="USD"):
        self.ledger = ledger
        self.currency = currency

    def rows(self):
        out = []
        for account in self.ledger.accounts():
            balance = self.ledger.balance(account, self.currency)
            debit = balance if balance.amount > 0 else Money.zero(self.currency)
            credit = -balance if balance.amount < 0 else Money.zero(self.currency)
            out.append((account, debit.format(), credit.format()))
        return out

    def render(self):
        return format_table(self.columns, self.rows(), self.aligns)
