"""An attempt's output excerpt (kit.core.output.excerpt) never exceeds its cap and never
shows a marked secret, whatever the output, the secrets, the cap and the end kept."""

from hypothesis import given, settings
from hypothesis import strategies as st

from kit.core.output import ELLIPSIS, OUTPUT_CAP_BYTES, WITHHELD, excerpt
from kit.core.redaction import MASK, MIN_SCRUB_CHARS

# small alphabets make secrets recur, overlap and straddle cuts; wide ones bring
# multi-byte characters (the cap is in bytes)
letters = st.sampled_from("ab()secrt\n é漢😀")
secret = st.text(letters, min_size=MIN_SCRUB_CHARS, max_size=12)


@st.composite
def outputs(draw):
    secrets = draw(st.lists(secret, min_size=0, max_size=3))
    pieces = draw(
        st.lists(st.one_of(st.text(letters, max_size=40), st.sampled_from(secrets or ["x"])))
    )
    return "".join(pieces), secrets


@settings(max_examples=600)
@given(
    made=outputs(),
    cap=st.one_of(st.integers(0, 64), st.just(OUTPUT_CAP_BYTES)),
    keep=st.sampled_from(["head", "tail"]),
    cut=st.booleans(),
)
def test_never_over_the_cap_never_a_secret(made, cap, keep, cut):
    text, secrets = made
    shown = excerpt(text, secrets, cap, keep=keep, cut=cut)
    assert len(shown.encode("utf-8")) <= cap
    for s in secrets:
        assert s not in shown


@given(text=st.text(st.sampled_from("abc é\n"), max_size=200))
def test_short_output_without_secrets_is_kept_whole(text):
    assert excerpt(text, [], OUTPUT_CAP_BYTES) == text


def test_a_long_output_keeps_its_end_marked_as_cut():
    text = "".join(f"line {i}\n" for i in range(2000))
    shown = excerpt(text, [], 100, keep="tail")
    assert shown.startswith(ELLIPSIS) and shown.endswith("line 1999\n")
    assert len(shown.encode()) <= 100
    head = excerpt(text, [], 100, keep="head")
    assert head.startswith("line 0\n") and head.endswith(ELLIPSIS)


def test_a_secret_is_masked_and_one_cut_in_half_leaves_no_fragment():
    token = "s3cr3t-t0ken-value"
    shown = excerpt(f"auth {token} ok", [token], 4096)
    assert shown == f"auth {MASK} ok"
    # the cut falls inside the token: its tail must not survive
    tail = excerpt("x" * 50 + token + "y" * 10, [token], 20, keep="tail")
    assert "t0ken" not in tail and "value" not in tail and len(tail.encode()) <= 20


def test_a_mask_that_spells_a_secret_with_its_neighbours_is_withheld():
    # "aaaa" masked leaves "(secret)x"; a secret "ret)x" then appears
    shown = excerpt("aaaax", ["aaaa", "ret)x"], 4096)
    assert shown == WITHHELD


def test_nul_is_written_visibly():
    assert excerpt("a\x00b", [], 10) == "a\\0b"
