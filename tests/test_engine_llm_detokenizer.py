"""engine.llm.tokenizer and engine.llm.detokenizer: bytes in, whole characters out, stops trimmed."""

from __future__ import annotations

from accord.engine.llm.detokenizer import Detokenizer
from accord.engine.llm.tokenizer import ByteTokenizer


def item(rid, ids, finished=False, matched=None):
    reason = {"type": "stop", "matched": matched} if finished else None
    return {"rid": rid, "ids": ids, "finished": finished, "finish_reason": reason}


def test_byte_tokenizer_round_trips_text_and_skips_special_ids():
    tok = ByteTokenizer(258, 256, (257,))
    ids = tok.encode("héllo ✓")
    assert ids[0] == 256 and tok.decode(ids + [257]) == "héllo ✓"
    assert tok.apply_chat_template([{"role": "user", "content": "hi"}]).endswith("<|assistant|>\n")


def test_a_character_split_across_steps_is_emitted_once_whole():
    check = "✓".encode()  # three bytes
    detok = Detokenizer(with_text=True)
    parts = [detok.convert(item("r", [check[0]]))["text"], detok.convert(item("r", [check[1]]))["text"],
             detok.convert(item("r", [check[2], 65], finished=True))["text"]]
    assert parts == ["", "", "✓A"]


def test_final_text_is_cut_at_the_matched_stop_string():
    detok = Detokenizer(with_text=True)
    assert detok.convert(item("r", list(b"ab")))["text"] == "ab"
    assert detok.convert(item("r", list(b"cEND"), finished=True, matched="END"))["text"] == "c"
    whole = Detokenizer(with_text=True).convert(item("n", list(b"xyEND"), finished=True, matched="END"))
    assert whole["text"] == "xy"


def test_skip_tokenizer_init_passes_ids_without_text():
    out = Detokenizer(with_text=False).convert(item("r", [1, 2, 3], finished=True))
    assert out["text"] is None and out["ids"] == [1, 2, 3]


def test_streamed_deltas_hold_back_a_possible_stop_string_start():
    detok = Detokenizer(with_text=True)
    running = dict(item("r", list(b"abE")), stop=["END"])
    assert detok.convert(running)["text"] == "ab"  # "E" may begin "END": held back
    assert detok.convert(dict(item("r", list(b"x")), stop=["END"]))["text"] == "Ex"
    last = dict(item("r", list(b"yEND"), finished=True, matched="END"), stop=["END"])
    assert detok.convert(last)["text"] == "y"
