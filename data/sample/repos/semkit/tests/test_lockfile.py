import pytest

from semkit.lockfile import diff_locks, normalize_name, parse_lock, summary

OLD = """# generated
attrs==22.1.0
Flask_Login==0.6.2
requests==2.31.0
"""
NEW = """attrs==23.1.0
flask-login==0.6.2
idna==3.6   # new
requests==2.28.0
"""


def test_normalize_name():
    assert normalize_name("Flask_Login") == normalize_name("flask.login") == "flask-login"


def test_parse_lock_skips_comments_and_normalizes():
    pins = parse_lock(OLD)
    assert list(pins) == ["attrs", "flask-login", "requests"]
    assert str(pins["requests"]) == "2.31.0"


@pytest.mark.parametrize("text, message", [("attrs>=1.0\n", "line 1"), ("a==1.0.0\nb==2.0.0\nA==1.0.0\n", "pinned twice")])
def test_parse_lock_errors_name_the_line(text, message):
    with pytest.raises(ValueError, match=message):
        parse_lock(text)


def test_diff_locks():
    changes = diff_locks(parse_lock(OLD), parse_lock(NEW))
    assert changes["added"] == ["idna"] and changes["removed"] == []
    assert [(n, str(a), str(b)) for n, a, b in changes["upgraded"]] == [("attrs", "22.1.0", "23.1.0")]
    assert [(n, str(a), str(b)) for n, a, b in changes["downgraded"]] == [("requests", "2.31.0", "2.28.0")]


def test_summary_lists_non_empty_kinds():
    changes = diff_locks(parse_lock(OLD), parse_lock(NEW))
    assert summary(changes) == ("added: idna\nupgraded: attrs 22.1.0 -> 23.1.0\n"
                                "downgraded: requests 2.31.0 -> 2.28.0")
