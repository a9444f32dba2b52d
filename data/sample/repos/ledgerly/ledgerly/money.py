"""Exact amounts of money in one currency."""
from dataclasses import dataclass
from decimal import ROUND_HALF_EVEN, Decimal, InvalidOperation

from ledgerly.currency import minor_units


@dataclass(frozen=True)
class Money:
    amount: Decimal
    currency: str

    def __post_init__(self):
        object.__setattr__(self, "amount", Decimal(self.amount))
        object.__setattr__(self, "currency", self.currency.upper())

    @classmethod
    def zero(cls, currency):
        return cls(Decimal(0), currency)

    def quantize(self):
        exponent = Decimal(1).scaleb(-minor_units(self.currency))
        return Money(self.amount.quantize(exponent, rounding=ROUND_HALF_EVEN), self.currency)

    def __add__(self, other):
        if not isinstance(other, Money):
            return NotImplemented
        return Money(self.amount + other.amount, self.currency)

    def __sub__(self, other):
        if not isinstance(other, Money):
            return NotImplemented
        return Money(self.amount - other.amount, self.currency)

    def __neg__(self):
        return Money(-self.amount, self.currency)

    def __mul__(self, factor):
        if isinstance(factor, Money):
            return NotImplemented
        return Money(self.amount * Decimal(str(factor)), self.currency)

    __rmul__ = __mul__

    def is_zero(self):
        return self.amount == 0

    def allocate(self, ratios):
        """Splits the amount by ``ratios``; the parts add up to the quantized amount."""
        total = sum(ratios)
        if total <= 0:
            raise ValueError("ratios must add up to a positive number")
        whole = self.quantize()
        step = Decimal(1).scaleb(-minor_units(self.currency))
        parts = [Money((whole.amount * r / total).quantize(step), self.currency) for r in ratios]
        remainder = whole.amount - sum(p.amount for p in parts)
        i = 0
        while remainder != 0:
            sign = step if remainder > 0 else -step
            parts[i] = Money(parts[i].amount + sign, self.currency)
            remainder -= sign
            i = (i + 1) % len(parts)
        return parts

    def format(self):
        q = self.quantize()
        return f"{q.amount:,} {q.currency}"


def parse_money(text, default_currency="USD"):
    """``"12.50 EUR"``, ``"EUR 12.50"`` or ``"12.50"`` (in ``default_currency``)."""
    parts = text.split()
    if len(parts) == 1:
        amount, currency = parts[0], default_currency
    elif len(parts) == 2 and parts[0].isalpha():
        currency, amount = parts
    elif len(parts) == 2:
        amount, currency = parts
    else:
        raise ValueError(f"cannot parse money: {text!r}")
    try:
        return Money(Decimal(amount), currency)
    except InvalidOperation:
        raise ValueError(f"cannot parse money: {text!r}") from None
