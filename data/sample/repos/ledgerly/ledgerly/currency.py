"""ISO 4217 currencies known to ledgerly and their number of minor units."""

CURRENCIES = {
    "CHF": 2,
    "EUR": 2,
    "GBP": 2,
    "JPY": 0,
    "KWD": 3,
    "USD": 2,
}


def minor_units(code):
    """Digits after the decimal point for ``code``; raises KeyError for unknown currencies."""
    return CURRENCIES[code.upper()]


def is_known(code):
    return code.upper() in CURRENCIES
