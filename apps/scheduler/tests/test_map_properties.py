"""Random text only ever yields a map or a typed error; no line is dropped silently."""

from gpu_scheduler.placement import InvalidMapError, MapLineError, parse_map_uncached
from gpu_scheduler.placement.grammar import SPACE
from hypothesis import given, settings
from hypothesis import strategies as st

_alphabet = st.sampled_from(list("0123456789=:,#- \t\r\nabcnode.GPUMIG_/x"))
map_like_text = st.text(alphabet=_alphabet, max_size=200)

entry = st.tuples(
    st.integers(min_value=0, max_value=10_000),
    st.from_regex(r"[a-z0-9]([-a-z0-9]{0,20}[a-z0-9])?", fullmatch=True),
    st.lists(st.integers(min_value=0, max_value=64), min_size=1, max_size=8, unique=True),
)


def _is_ignorable(line: str) -> bool:
    stripped = line.rstrip("\r").strip(SPACE)
    return not stripped or stripped.startswith("#")


@settings(max_examples=400, deadline=None)
@given(st.one_of(map_like_text, st.text(max_size=200)))
def test_random_text_yields_a_map_or_typed_errors(text):
    try:
        parsed = parse_map_uncached(text)
    except InvalidMapError as err:
        assert err.errors
        assert all(isinstance(e, MapLineError) and str(e).startswith(f"line {e.line}: ") for e in err.errors)
        return
    # Valid: every line that is not blank or a comment became exactly one entry.
    meaningful = [n for n, line in enumerate(text.split("\n"), 1) if not _is_ignorable(line)]
    assert sorted(e.line for e in parsed.values()) == meaningful


@settings(max_examples=200, deadline=None)
@given(st.lists(entry, min_size=1, max_size=30, unique_by=lambda e: e[0]))
def test_written_entries_parse_back_to_themselves(entries):
    text = "\n".join(f"{i}={node}:{','.join(map(str, devs))}" for i, node, devs in entries)
    parsed = parse_map_uncached(text)
    assert {i: (e.node, list(map(int, e.devices))) for i, e in parsed.items()} == {
        i: (node, devs) for i, node, devs in entries
    }
