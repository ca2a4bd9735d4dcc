"""Puts refuse what no record can hold with InvalidMessage naming the culprit, with either
codec, even when the message changes while it is encoded (a hook of its own, or another
thread of a daemon): never another exception, never a record of a moment that did not exist."""

import threading

import pytest

from mqfs.store import Message, MessageStore
from mqfs.store.errors import InvalidMessage
from mqfs.store.writes import SMALL_BATCH
from tests.store.helpers import small_config, use_codec


class Flicker:
    """A property value whose first formatting holds a separator byte and later ones do not:
    a check and a second look for the culprit see two different texts."""

    def __init__(self) -> None:
        self.calls = 0

    def __format__(self, spec: str) -> str:
        self.calls += 1
        return "v\x02" if self.calls == 1 else "v"


class Hider(dict):
    """Properties that deny holding the checksum's own name when asked."""

    def __contains__(self, name: object) -> bool:
        return False


class Meddler:
    """A property value that, as it is formatted, rewrites its dict's other value with a
    separator byte (the same size, so no iteration notices)."""

    def __init__(self, props: dict) -> None:
        self.props = props

    def __format__(self, spec: str) -> str:
        self.props["a"] = "x\x01y"
        return "m"


def _m(props: dict) -> Message:
    return Message("T", b"body", properties=props, born_timestamp=1_700_000_000_000)


def _puts(store: MessageStore):
    """A put, a batch of one, a few (encoded one by one) and many (encoded as one batch):
    each gives the last message's result."""
    return (store.put, lambda m: store.put_batch([m])[-1],
            lambda m: store.put_batch([_m({"k": "v"}), m])[-1],
            lambda m: store.put_batch([_m({"k": "v"}) for _ in range(SMALL_BATCH)] + [m])[-1])


@pytest.mark.parametrize("way", ["c", "python"])
def test_a_property_whose_text_changes_between_check_and_search_is_refused(tmp_path, monkeypatch, way):
    use_codec(monkeypatch, way)
    with MessageStore(str(tmp_path), small_config()) as s:
        for put in _puts(s):
            for props in ({"a": Flicker()}, {"k": "v", "a": Flicker()}):
                with pytest.raises(InvalidMessage, match=r"property 'a' contains a \\x01 or \\x02"):
                    put(_m(props))
        assert s.put_batch([_m({"k": "v"})])  # the store still takes good messages


@pytest.mark.parametrize("way", ["c", "python"])
def test_a_dict_changed_by_a_hook_is_encoded_as_one_snapshot(tmp_path, monkeypatch, way):
    use_codec(monkeypatch, way)
    with MessageStore(str(tmp_path), small_config()) as s:
        for put in _puts(s):
            props: dict = {"a": "clean"}
            props["b"] = Meddler(props)
            r = put(_m(props))  # the snapshot taken before the hook ran: both values clean
            assert s.get("T", 0, r.queue_offset).properties == {"a": "clean", "b": "m"}
            assert props["a"] == "x\x01y"
            with pytest.raises(InvalidMessage, match=r"property 'a' contains"):
                put(_m(props))  # the dict as the hook left it


@pytest.mark.parametrize("way", ["c", "python"])
def test_properties_rewritten_by_another_thread_never_escape_as_another_error(tmp_path, monkeypatch, way):
    """Only InvalidMessage or a put: the flips race the encoder, so what each put meets varies,
    but the outcome is one of the two every time."""
    use_codec(monkeypatch, way)
    props = [{f"k{i}": "v", "KEYS": "a"} for i in range(SMALL_BATCH + 8)]  # encoded as one batch
    stop = threading.Event()

    def meddle() -> None:
        while not stop.is_set():
            for p in props:
                p["KEYS"] = "a\x01b"
                p["KEYS"] = "a"

    t = threading.Thread(target=meddle)
    t.start()
    outcomes = set()
    try:
        with MessageStore(str(tmp_path), small_config()) as s:
            for _ in range(200):
                try:
                    s.put_batch([_m(p) for p in props])
                    s.put(_m(props[0]))
                    outcomes.add("put")
                except InvalidMessage:
                    outcomes.add("refused")
    finally:
        stop.set()
        t.join()
    assert outcomes <= {"put", "refused"} and outcomes


@pytest.mark.parametrize("way", ["c", "python"])
def test_a_str_body_is_refused_naming_the_body(tmp_path, monkeypatch, way):
    use_codec(monkeypatch, way)
    with MessageStore(str(tmp_path), small_config()) as s:
        for put in _puts(s):
            with pytest.raises(InvalidMessage, match="^message body must be bytes, not str$"):
                put(Message("T", "text", born_timestamp=1_700_000_000_000))  # type: ignore[arg-type]


@pytest.mark.parametrize("way", ["c", "python"])
def test_the_checksum_property_is_refused_even_from_a_dict_that_hides_it(tmp_path, monkeypatch, way):
    use_codec(monkeypatch, way)
    with MessageStore(str(tmp_path), small_config()) as s:
        for put in _puts(s):
            for props in (Hider({"__CRC32#": "1"}), Hider({"a": "b", "__CRC32#": "1"})):
                with pytest.raises(InvalidMessage, match="reserved for the checksum"):
                    put(_m(props))
