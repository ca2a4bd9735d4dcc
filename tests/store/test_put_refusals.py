"""Puts refuse what no record can hold with InvalidMessage naming the culprit, with either
codec, even when the message changes while it is encoded (a hook of its own, or another
thread of a daemon): never another exception, never a record of a moment that did not exist."""

import threading

import pytest

from mqfs.store import Message, MessageStore
from mqfs.store.errors import InvalidMessage
from mqfs.store.writes import SMALL_BATCH
from tests.store.helpers import file_hashes, small_config, use_codec


class Hider(dict):
    """Properties that deny holding the checksum's own name when asked."""

    def __contains__(self, name: object) -> bool:
        return False


def _m(props: dict) -> Message:
    return Message("T", b"body", properties=props, born_timestamp=1_700_000_000_000)


def _puts(store: MessageStore):
    """A put, a batch of one, a few (encoded one by one) and many (encoded as one batch):
    each gives the last message's result."""
    return (store.put, lambda m: store.put_batch([m])[-1],
            lambda m: store.put_batch([_m({"k": "v"}), m])[-1],
            lambda m: store.put_batch([_m({"k": "v"}) for _ in range(SMALL_BATCH)] + [m])[-1])


@pytest.mark.parametrize("way", ["c", "python"])
def test_a_property_that_is_not_text_is_refused_before_any_byte(tmp_path, monkeypatch, way):
    """Names and values are str. Before, other values were formatted into the record, and
    the indexes then met KEYS, UNIQ_KEY or TAGS as they were, after it was written: a TAGS
    of 12345 left a record without its unit (the next put took its queue offset again), a
    UNIQ_KEY of 12345 stored a put that raised."""
    use_codec(monkeypatch, way)
    root = str(tmp_path)
    with MessageStore(root, small_config()) as s:
        s.put(_m({"KEYS": "k", "TAGS": "t"}))
        s.flush()
        before = file_hashes(root, skip=("checkpoint", "abort", "lock"))
        for put in _puts(s):
            for name in ("KEYS", "UNIQ_KEY", "TAGS", "a"):
                for value in (12345, None, b"bytes", 1.5):
                    with pytest.raises(InvalidMessage, match=rf"^property '{name}' is not text "
                                                             rf"\({type(value).__name__}\)"):
                        put(_m({"k": "v", name: value}))
            with pytest.raises(InvalidMessage, match=r"^property 1 is not text \(int\)"):
                put(_m({1: "v"}))
        s.flush()
        assert file_hashes(root, skip=("checkpoint", "abort", "lock")) == before
        assert s.put(_m({"TAGS": "t"})).queue_offset == 1  # the store still takes good messages


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
