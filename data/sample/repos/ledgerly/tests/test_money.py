from decimal import Decimal

import pytest

from ledgerly.money import Money, parse_money


def test_allocate_keeps_every_cent():
    parts = Money(Decimal("100"), "usd").allocate([1, 1, 1])
    assert [p.amount for p in parts] == [Decimal("33.34"), Decimal("33.33"), Decimal("33.33")]


def test_quantize_uses_minor_units():
    assert Money(Decimal("10.5"), "JPY").quantize().amount == Decimal("10")


@pytest.mark.parametrize("text", ["12.50 EUR", "EUR 12.50"])
def test_parse_money_both_orders(text):
    assert parse_money(text) == Money(Decimal("12.50"), "EUR")


def test_parse_money_rejects_garbage():
    with pytest.raises(ValueError):
        parse_money("twelve euros")
