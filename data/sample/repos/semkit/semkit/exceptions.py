"""The errors semkit raises; all derive from SemkitError and ValueError."""


class SemkitError(ValueError):
    """Base class of every semkit error."""


class InvalidVersion(SemkitError):
    def __init__(self, text):
        super().__init__(f"not a semantic version: {text!r}")
        self.text = text


class InvalidRange(SemkitError):
    def __init__(self, text, reason):
        super().__init__(f"invalid range {text!r}: {reason}")
        self.text = text
        self.reason = reason
