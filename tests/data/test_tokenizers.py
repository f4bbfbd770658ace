"""Word / char / subword tokenizers, the DSF sec. 4.3 subword rules on hand examples, registry, JSON."""

import json

import pytest

from dsf_lightning.data.tokenizers import (
    CharTokenizer,
    SubwordTokenizer,
    Tokenizer,
    TokenizerError,
    WordTokenizer,
    get_tokenizer,
    link_vowels,
    list_tokenizers,
    merge_stragglers,
    register_tokenizer,
    segment_word,
    split_on_vowels,
    tokenizer_from_json,
)


def test_word_tokenizer_splits_on_whitespace_and_appends_eos():
    tok = WordTokenizer()
    assert tok.tokenize_line(" pierre <unk> N years old ") == ["pierre", "<unk>", "N", "years", "old", "<eos>"]
    assert tok.tokenize_line("") == ["<eos>"]  # blank lines count (WikiText convention)
    assert WordTokenizer(lowercase=True, eos="</s>").tokenize_line("A b") == ["a", "b", "</s>"]
    assert WordTokenizer(eos=None).tokenize_line("a b") == ["a", "b"]


def test_char_tokenizer_ptb_format():
    tok = CharTokenizer(mode="ptb")
    # a PTB char line: symbols separated by spaces, "_" between words, leading space after line 1
    assert tok.tokenize_line(" < u n k > _ N _ a e r ") == ["<", "u", "n", "k", ">", "_", "N", "_", "a", "e", "r", "<eos>"]


def test_char_tokenizer_plain_text_maps_space_to_underscore():
    tok = CharTokenizer(mode="plain")
    assert tok.tokenize_line("To be, ") == ["T", "o", "_", "b", "e", ",", "_", "<eos>"]
    assert tok.tokenize_line("") == ["<eos>"]
    assert CharTokenizer(eos=None, space="~").tokenize_line("a b") == ["a", "~", "b"]
    with pytest.raises(TokenizerError, match="mode"):
        CharTokenizer(mode="bytes")


# ---------------------------------------------------------------- DSF paper sec. 4.3 subword rules
def test_rule_1_splits_on_vowels():
    assert split_on_vowels("banknote") == ["b", "a", "nkn", "o", "t", "e"]
    assert split_on_vowels("queue") == ["q", "u", "e", "u", "e"]
    assert split_on_vowels("rhythm") == ["rhythm"]  # y is not in the vowel list
    assert split_on_vowels("Eat") == ["E", "a", "t"]  # case-insensitive


def test_rule_2_links_each_vowel_with_the_next_consonant():
    assert link_vowels(["b", "a", "nkn", "o", "t", "e"]) == ["b", "an", "kn", "ot", "e"]
    assert link_vowels(["str", "e", "e", "t"]) == ["str", "e", "et"]  # a vowel before a vowel stays alone
    assert link_vowels(["i", "d", "e", "a"]) == ["id", "e", "a"]


def test_rule_3_merges_single_characters_right_unless_left_is_shorter():
    assert merge_stragglers(["b", "an", "kn", "ot", "e"]) == ["ban", "kn", "ote"]  # first right, last left
    assert merge_stragglers(["str", "e", "et"]) == ["str", "eet"]  # left (3) not shorter than right (2)
    assert merge_stragglers(["ab", "c", "def"]) == ["abc", "def"]  # left (2) shorter than right (3)
    assert merge_stragglers(["id", "e", "a"]) == ["id", "ea"]  # consecutive stragglers pair up
    assert merge_stragglers(["a"]) == ["a"]


@pytest.mark.parametrize(
    "word, pieces",
    [
        ("banknote", ["ban", "kn", "ote"]),
        ("street", ["str", "eet"]),
        ("the", ["the"]),
        ("language", ["lan", "gu", "age"]),
        ("strength", ["str", "en", "gth"]),
        ("onion", ["on", "ion"]),
        ("idea", ["id", "ea"]),
        ("calloway", ["cal", "low", "ay"]),
        ("hydro-quebec", ["hydr", "o-", "qu", "eb", "ec"]),
        ("a", ["a"]),
        ("N", ["N"]),
        ("n't", ["n't"]),
    ],
)
def test_segment_word_hand_examples(word, pieces):
    assert segment_word(word) == pieces
    assert "".join(pieces) == word


def test_subword_fit_keeps_frequent_subwords_and_decomposes_rare_ones():
    lines = ["the banknote", "the the banknote", "street"]
    tok = SubwordTokenizer(min_count=2).fit(lines)
    assert tok.subwords == ["the", "ban", "kn", "ote"]  # "str", "eet" seen once: rare
    assert tok.chars == sorted(set("thebanknotestreet"))  # every character of the training words
    assert tok.tokenize_line("street the") == ["s", "t", "r", "e", "e", "t", "the", "<eos>"]
    assert tok.tokenize_line("knot") == ["kn", "o", "t", "<eos>"]  # unseen word: kept "kn" + rare "ot"
    assert tok.symbols()[:4] == ["the", "ban", "kn", "ote"]


def test_subword_special_tokens_stay_whole_and_are_always_kept():
    tok = SubwordTokenizer(min_count=100).fit(["<unk> is rare"])
    assert "<unk>" in tok.subwords
    assert tok.tokenize_line("<unk> is") == ["<unk>", "i", "s", "<eos>"]


def test_subword_boundary_symbol_between_words():
    tok = SubwordTokenizer(min_count=1, boundary="_").fit(["the banknote"])
    assert tok.tokenize_line("the banknote") == ["the", "_", "ban", "kn", "ote", "<eos>"]
    assert "_" in tok.symbols()


def test_a_boundary_symbol_of_several_characters_stays_one_symbol():
    tok = SubwordTokenizer(min_count=1, boundary="<w>").fit(["the banknote"])
    assert tok.tokenize_line("the banknote") == ["the", "<w>", "ban", "kn", "ote", "<eos>"]


@pytest.mark.parametrize("tok", [
    WordTokenizer(), WordTokenizer(eos=None, lowercase=True), CharTokenizer(mode="plain"), CharTokenizer(mode="ptb"),
    SubwordTokenizer(min_count=1).fit(["the banknote is here"]),
    SubwordTokenizer(min_count=1, boundary="<w>").fit(["the banknote is here"]),
], ids=repr)
def test_a_line_tokenized_in_parts_gives_the_line_s_symbols(tok):
    """tokenize_part over parts cut where cut_at allows == tokenize_line (what streaming scoring relies on)."""
    line = "  the Banknote  is\there  naïve "
    cuts = [i + 1 for i, c in enumerate(line) if c in " \t"] if tok.cut_at == "space" else list(range(1, len(line)))
    for step in (1, 2, 3):
        bounds = [0, *cuts[::step], len(line)]
        parts = [line[a:b] for a, b in zip(bounds, bounds[1:]) if b > a]
        got, continued = [], False
        for i, part in enumerate(parts):
            last = i == len(parts) - 1
            symbols = tok.tokenize_part(part, continued=continued, last=last)
            got += symbols
            continued = not last and (continued or bool(symbols))
        assert got == tok.tokenize_line(line)


def test_unfitted_subword_tokenizer_segments_without_cut_off():
    tok = SubwordTokenizer()
    assert not tok.fitted
    assert tok.tokenize_line("banknote") == ["ban", "kn", "ote", "<eos>"]
    with pytest.raises(TokenizerError, match="not fitted"):
        tok.symbols()


@pytest.mark.parametrize(
    "tok",
    [WordTokenizer(lowercase=True), CharTokenizer(mode="ptb"), SubwordTokenizer(min_count=2).fit(["the the banknote"])],
    ids=["word", "char", "subword"],
)
def test_json_round_trip_keeps_options_and_learned_state(tok):
    text = tok.to_json()
    assert json.loads(text)["name"] == tok.name
    again = tokenizer_from_json(text)
    assert type(again) is type(tok) and again.options() == tok.options() and again.state() == tok.state()
    line = "The banknote < u n k >"
    assert again.tokenize_line(line) == tok.tokenize_line(line)
    assert type(tok).from_json(text).to_json() == text


def test_from_json_of_another_class_or_garbage_fails():
    with pytest.raises(TokenizerError, match="not a CharTokenizer"):
        CharTokenizer.from_json(WordTokenizer().to_json())
    with pytest.raises(TokenizerError):
        tokenizer_from_json("{")


def test_registry_by_name():
    assert {"word", "char", "subword"} <= set(list_tokenizers())
    tok = get_tokenizer("subword", min_count=3)
    assert isinstance(tok, SubwordTokenizer) and tok.min_count == 3
    with pytest.raises(TokenizerError, match="unknown tokenizer 'bpe'; known: char, subword") as info:
        get_tokenizer("bpe")
    assert "word" in str(info.value)
    with pytest.raises(TokenizerError, match="bad options"):
        get_tokenizer("word", vowels="aeiou")


def test_register_a_custom_tokenizer():
    @register_tokenizer("test-reverse")
    class Reverse(Tokenizer):
        def tokenize_line(self, line):
            return self._end(line.split()[::-1])

    tok = get_tokenizer("test-reverse")
    assert tok.tokenize_line("a b") == ["b", "a", "<eos>"]
    assert tokenizer_from_json(tok.to_json()).tokenize_line("a b") == ["b", "a", "<eos>"]
    with pytest.raises(TokenizerError, match="already registered"):
        register_tokenizer("word")(Reverse)
