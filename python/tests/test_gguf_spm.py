"""The SentencePiece ("llama") vocabulary of a GGUF file (src/model/spm_tokenizer.cpp), on the
jamba fixture converted in f32 by llama.cpp's converter (gguf_files.py):

- with the vocabulary a conversion from a SentencePiece model writes
  (gguf_files.sentencepiece_vocabulary), texts with runs of spaces, tabs and newlines, accented
  and CJK characters, emoji and a control character (outside the fixture's 386 tokens: byte
  fallback to <0xNN> tokens) encode to the ids transformers gives with the fixture's
  tokenizer.json, decode to transformers' text, and give the text back;
- as the converter writes it from tokenizer.json alone (every score -1000, add_space_prefix
  false), the ids are llama.cpp's: with equal scores the leftmost pair is merged first, no "▁"
  goes before the text, and the end-of-sequence token "</s>", typed normal, is a control token
  all the same. LLAMA_CPP_IDS were recorded with llama_tokenize (parse_special) of
  llama-cpp-python 0.3.36's libllama, which is not in CI.

Dimension legend: L prompt length."""
import os

import pytest

import ssmkit
from gguf_files import convert, sentencepiece_vocabulary
from test_model import MODELS, PROMPT_TEXT

pytest.importorskip("transformers")

JAMBA = os.path.join(MODELS, "jamba")

# Texts the fixed checks run on, besides PROMPT_TEXT.
TEXTS = ["  two  spaces\tand\nlines ", " leading", "trailing  ", "\n\n", "a\x7fb",
         "na\u00efve \u00e9t\u00e9 \u65e5\u672c \U0001f642!", "d.\n's, tate e'"]

# (text, ids) of the file as converted, from llama.cpp.
LLAMA_CPP_IDS = [
    ("The", [297, 346]),
    ("It doesn't look back", [291, 320, 327, 382, 343, 366, 327, 312, 315, 315, 362, 302, 342, 311]),
    ("A quick brown fox jumps over the lazy dog. Numbers: 12 345",
     [284, 327, 317, 321, 309, 303, 362, 302, 318, 315, 323, 344, 306, 315, 324, 327, 310, 367,
      316, 331, 315, 322, 341, 354, 346, 327, 363, 326, 368, 382, 307, 270, 327, 293, 367, 302,
      341, 319, 281, 337, 376, 274, 377]),
    ("Caf\u00e9, na\u00efve, \u65e5\u672c\u8a9e",
     [286, 301, 306, 198, 172, 329, 314, 301, 198, 178, 322, 359, 233, 154, 168, 233, 159, 175,
      235, 173, 161]),
    ("  two  spaces\tand\nlines ", [328, 320, 323, 315, 328, 319, 351, 343, 259, 355, 260, 312, 361,
                                    360]),
    ("tate</s>tate ", [353, 305, 2, 371]),
]


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """The jamba fixture converted (f32): the file as written, and a copy with the vocabulary a
    SentencePiece model would give."""
    import shutil
    tmp = tmp_path_factory.mktemp("spm")
    as_converted = convert(JAMBA, str(tmp / "jamba.gguf"), "f32")
    edited = str(tmp / "jamba-sentencepiece.gguf")
    shutil.copy(as_converted, edited)
    return dict(as_converted=ssmkit.Model.load(as_converted).tokenizer,
                sentencepiece=ssmkit.Model.load(sentencepiece_vocabulary(edited, JAMBA)).tokenizer)


@pytest.fixture(scope="module")
def reference():
    from transformers import AutoTokenizer
    return AutoTokenizer.from_pretrained(JAMBA)


def check_against_transformers(tokenizer, reference, text):
    ids = tokenizer.encode(text)
    assert ids == reference(text, add_special_tokens=False)["input_ids"], repr(text)
    assert tokenizer.decode(ids) == reference.decode(ids) == text, repr(text)


def test_encodes_and_decodes_as_transformers(files, reference):
    tokenizer = files["sentencepiece"]
    assert tokenizer.name.startswith("spm (")
    assert tokenizer.vocab_size == 386
    for text in PROMPT_TEXT + tuple(TEXTS):
        check_against_transformers(tokenizer, reference, text)
    # Characters outside the vocabulary are their UTF-8 bytes.
    ids = tokenizer.encode("\u65e5")
    assert [tokenizer.decode([i]) for i in ids[1:]] == ["\ufffd"] * 3
    assert ids[1:] == [3 + b for b in "\u65e5".encode()]


def test_fresh_text_as_transformers(files, reference, rng):
    alphabet = (list("abcdehklnoprst TA.,!'0124\n\t") + ["  ", "   ", "\u00e9", "\u00ef", "\u65e5",
                                                         "\U0001f642", "\x7f", "\u0250"])
    for _ in range(200):
        text = "".join(rng.choice(alphabet, size=int(rng.integers(1, 40))))
        check_against_transformers(files["sentencepiece"], reference, text)


def test_the_file_as_converted_encodes_as_llama_cpp(files):
    tokenizer = files["as_converted"]
    for text, ids in LLAMA_CPP_IDS:
        assert tokenizer.encode(text) == ids, text
        assert tokenizer.decode(ids, skip_special=True) == text.replace("</s>", "")
    assert tokenizer.decode([2]) == "</s>"
