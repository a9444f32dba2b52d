# Helpers kept from the Python 2 days; nothing in ledgerly imports this module any more.
import sys

try:
    from decimal import Decimal
except ImportError, exc:
    print >>sys.stderr, "decimal module missing: %s" % exc
    raise

string_types = (str, unicode)


def to_decimal(value):
    if isinstance(value, string_types):
        return Decimal(value.strip())
    return Decimal(value)
