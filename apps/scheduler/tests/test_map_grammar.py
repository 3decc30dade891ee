"""The gpu-scheduling-map grammar: golden cases, every error typed and line-numbered."""

import pytest
from gpu_scheduler.placement import (
    DuplicateDeviceError,
    DuplicateIndexError,
    EmptyMapError,
    InvalidDeviceError,
    InvalidIndexError,
    InvalidMapError,
    InvalidNodeError,
    MalformedEntryError,
    MapEntry,
    MapLineError,
    MapTooLargeError,
    MigDeviceError,
    parse_map,
)
from gpu_scheduler.placement import (
    parse_map_uncached as parse,
)
from gpu_scheduler.placement.grammar import (
    _DNS1123_SUBDOMAIN,
    ENTRY_BYTES,
    MAX_ERRORS_KEPT,
    MAX_MAP_BYTES,
    _parse_line,
    _parse_line_by_line,
    _parse_plain_line,
    _ParsedMapCache,
    _read_plain_map,
    parsed_size,
)
from hypothesis import given, settings
from hypothesis import strategies as st

TASK_MAP = "0=node1:0,1\n1=node2:2\n2=node3:0,1,2\n3=node4:3\n4=node4:3\n"
GPU_UUID = "GPU-8a2b4c6d-1e2f-3a4b-5c6d-7e8f9a0b1c2d"
MIG_UUID = "MIG-1a2b3c4d-5e6f-7a8b-9c0d-1e2f3a4b5c6d"


def only_error(text):
    with pytest.raises(InvalidMapError) as caught:
        parse(text)
    assert len(caught.value.errors) == 1, caught.value.errors
    return caught.value.errors[0]


@pytest.mark.pipeline_sample
def test_task_map_parses_to_the_task_placement():
    parsed = parse(TASK_MAP)
    assert {i: (e.node, e.cuda_visible_devices) for i, e in parsed.items()} == {
        0: ("node1", "0,1"),
        1: ("node2", "2"),
        2: ("node3", "0,1,2"),
        3: ("node4", "3"),
        4: ("node4", "3"),
    }


def test_to_json_is_the_documented_shape():
    assert parse("0=node1:0,1")
    assert parse("0=node1:0,1").to_json() == {
        "0": {"node": "node1", "devices": ["0", "1"], "cuda_visible_devices": "0,1"}
    }


def test_blank_lines_comments_spaces_and_crlf_are_accepted():
    text = "# placement for the check service\r\n\r\n  0 = node1 : 0 , 1  \r\n\t# indented comment\r\n1=node2:2\r\n"
    parsed = parse(text)
    assert parsed[0].devices == ("0", "1")
    assert parsed[0].line == 3
    assert parsed[1].line == 5


def test_uuids_and_aliases_are_accepted():
    other_gpu = GPU_UUID[:-1] + "e"
    parsed = parse(f"0=GPU_Pool-A:{GPU_UUID},{other_gpu}\n1=node2:MIG-GPU-{GPU_UUID[4:]}/1/0\n2=node3:{MIG_UUID}")
    assert parsed[0].node == "GPU_Pool-A"
    assert parsed[0].devices == (GPU_UUID, other_gpu)
    assert parsed[1].cuda_visible_devices == f"MIG-GPU-{GPU_UUID[4:]}/1/0"
    assert parsed[2].devices == (MIG_UUID,)


def test_two_mig_devices_on_one_line_are_an_error_that_says_why():
    other_mig = f"MIG-GPU-{GPU_UUID[4:]}/1/0"
    error = only_error(f"0=node1:{MIG_UUID}\n1=node2:{MIG_UUID[:-1]}e,{other_mig}\n")
    assert isinstance(error, MigDeviceError)
    assert error.line == 2
    assert "lists 2 MIG devices" in str(error)
    assert "one CUDA process sees at most one MIG device" in str(error)


@pytest.mark.parametrize("devices", [f"0,{MIG_UUID}", f"{MIG_UUID},{GPU_UUID}"])
def test_a_mig_device_beside_whole_gpus_is_an_error_that_says_why(devices):
    error = only_error(f"0=node1:{devices}\n")
    assert isinstance(error, MigDeviceError)
    assert error.line == 1
    assert f"{MIG_UUID} beside whole GPUs" in str(error)
    assert "one CUDA process sees at most one MIG device" in str(error)


@pytest.mark.parametrize("devices", [f"0,{GPU_UUID}", f"{GPU_UUID},1", f"2 , {GPU_UUID} , 3"])
def test_a_line_naming_gpus_both_by_ordinal_and_by_uuid_is_an_error_that_says_why(devices):
    # Issue 16, point 2: GPU 0 and GPU-<uuid> may be one GPU; nothing can tell without an
    # inventory of the node, so one line must not mix them.
    error = only_error(f"0=node1:{devices}\n")
    assert type(error).__name__ == "MixedSpellingError"
    assert error.line == 1
    assert "by its ordinal and GPU-8a2b4c6d-1e2f-3a4b-5c6d-7e8f9a0b1c2d by its UUID" in str(error)
    assert "write every device of a line the same way (all ordinals or all UUIDs)" in str(error)


def test_node_name_of_253_characters_is_accepted_and_254_is_not():
    name = ".".join(["a" * 63] * 3) + "." + "b" * 61  # 253 characters
    assert len(name) == 253
    assert parse(f"0={name}:0")[0].node == name
    err = only_error(f"0={name}x:0")
    assert isinstance(err, InvalidNodeError)


@pytest.mark.parametrize(
    ("text", "error_type", "line", "fragment"),
    [
        ("0=node1:0\nnode2:1", MalformedEntryError, 2, "no '='"),
        ("0=node1", MalformedEntryError, 1, "no ':'"),
        ("-1=node1:0", InvalidIndexError, 1, "not a non-negative integer"),
        ("x=node1:0", InvalidIndexError, 1, "'x'"),
        ("=node1:0", InvalidIndexError, 1, "''"),
        ("99999999999=node1:0", InvalidIndexError, 1, "larger than"),
        ("0=node1:0\n\n0=node2:1", DuplicateIndexError, 3, "already given on line 1"),
        ("0=:0", InvalidNodeError, 1, "missing node name"),
        ("0=-node1:0", InvalidNodeError, 1, "neither a Kubernetes node name"),
        ("0=node1!:0", InvalidNodeError, 1, "'node1!'"),
        ("0=node 1:0", InvalidNodeError, 1, "'node 1'"),
        ("0=node1:", InvalidDeviceError, 1, "no devices"),
        ("0=node1:0,,1", InvalidDeviceError, 1, "stray comma"),
        ("0=node1:0,", InvalidDeviceError, 1, "stray comma"),
        ("0=node1:-1", InvalidDeviceError, 1, "'-1'"),
        ("0=node1:GPU-xyz", InvalidDeviceError, 1, "GPU-<uuid>"),
        ("0=node1:0:1", InvalidDeviceError, 1, "'0:1'"),
        ("0=node1:0,1,0", DuplicateDeviceError, 1, "device 0 appears twice"),
        ("0=node1:1,01", DuplicateDeviceError, 1, "appears twice"),
        ("0=node1:0 # inline comment", InvalidDeviceError, 1, "'0 # inline comment'"),
        ("0=node1:0\rx", InvalidDeviceError, 1, "\\r"),
    ],
)
def test_each_violation_is_a_typed_error_with_line_and_text(text, error_type, line, fragment):
    err = only_error(text)
    assert isinstance(err, error_type)
    assert err.line == line
    assert str(err).startswith(f"line {line}: ")
    assert fragment in str(err)
    assert err.text.strip() in text


@pytest.mark.parametrize("text", ["", "\n\n", "# only a comment\n", "   \r\n"])
def test_a_map_without_entries_is_an_error(text):
    err = only_error(text)
    assert isinstance(err, EmptyMapError)
    assert "no entry" in str(err)


def test_every_bad_line_is_reported_not_just_the_first():
    with pytest.raises(InvalidMapError) as caught:
        parse("0=node1:0\nbad\n2=node3:x\n3=node4:3\n3=node4:2")
    assert [e.line for e in caught.value.errors] == [2, 3, 5]
    assert str(caught.value).splitlines()[0].startswith("line 2: ")


def test_error_listing_is_capped_and_says_how_many_more():
    with pytest.raises(InvalidMapError) as caught:
        parse("\n".join(f"bad{i}" for i in range(50)))
    message = str(caught.value)
    assert len(caught.value.errors) == 50
    assert message.count("\n") == InvalidMapError.MAX_LISTED
    assert message.endswith("... and 30 more errors")


def test_long_offending_text_is_shortened_in_the_message():
    err = only_error("0=node1:" + "x" * 5000)
    assert len(str(err)) < 400


def test_ten_thousand_line_map_parses():
    text = "\n".join(f"{i}=node{i % 100}:{i % 8}" for i in range(10_000))
    parsed = parse(text)
    assert len(parsed) == 10_000
    assert parsed[9_999].node == "node99"


def test_a_map_larger_than_kubernetes_allows_is_refused_before_parsing():
    err = only_error("0=node1:0\n" * (MAX_MAP_BYTES // 10 + 1))
    assert isinstance(err, MapTooLargeError)
    assert f"Kubernetes allows {MAX_MAP_BYTES} bytes" in str(err)


def test_errors_past_the_kept_ones_are_counted_not_stored():
    with pytest.raises(InvalidMapError) as caught:
        parse("\n".join(f"bad{i}" for i in range(MAX_ERRORS_KEPT + 50)))
    assert len(caught.value.errors) == MAX_ERRORS_KEPT
    assert caught.value.total == MAX_ERRORS_KEPT + 50
    assert str(caught.value).endswith(f"... and {MAX_ERRORS_KEPT + 50 - InvalidMapError.MAX_LISTED} more errors")


def test_the_parse_cache_returns_the_same_map_and_is_bounded_by_what_it_holds():
    # Each map's size is its text plus ENTRY_BYTES per entry.
    cache = _ParsedMapCache(max_bytes=2 * ENTRY_BYTES + 30)
    first = cache("0=node1:0,1\n")
    assert cache("0=node1:0,1\n") is first
    cache("1=node2:2\n")
    assert cache.held_bytes == 12 + 10 + 2 * ENTRY_BYTES
    cache("2=node3:0,1,2\n")  # over the bound: the least recently used goes
    assert cache.held_bytes == 10 + 14 + 2 * ENTRY_BYTES
    assert cache("0=node1:0,1\n") is not first
    with pytest.raises(InvalidMapError):
        cache("nonsense")


def test_the_parse_cache_counts_the_entries_not_only_the_text():
    # 100 short lines: 0.6 KB of text, some 20 KB parsed. A bound of 4 KiB holds none of it.
    text = "".join(f"{i}=n:0\n" for i in range(100))
    cache = _ParsedMapCache(max_bytes=4096)
    first = cache(text)
    assert cache.held_bytes == 0
    assert cache(text) is not first
    assert parsed_size(text, first) == len(text) + 100 * ENTRY_BYTES


def test_the_entry_cost_the_cache_assumes_is_what_an_entry_holds():
    # ENTRY_BYTES is a measurement; a change to MapEntry that makes it much larger
    # must change the bound with it.
    import tracemalloc

    text = "".join(f"{i}=bn-{i % 100}:{i % 8}\n" for i in range(10_000))
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        parsed = parse(text)
        held = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    per_entry = held / len(parsed)
    assert 0.5 * ENTRY_BYTES < per_entry < 1.5 * ENTRY_BYTES, per_entry


def test_the_shared_parse_cache_parses_like_the_parser():
    assert parse_map(TASK_MAP).to_json() == parse(TASK_MAP).to_json()


# Lines near the plain form: the fast reader must accept only what the full
# checks accept, and read it the same way.
_PLAIN_PARTS = {
    "index": st.sampled_from(["0", "7", "00", "2147483647", "2147483648", "9999999999", "12345678901", "-1", " 3"]),
    "node": st.sampled_from(
        ["node1", "a", "bn-0", "n.example.com", "-bad", "bad-", "Node1", "a..b", "a" * 253, "a" * 254]
    ),
    "devices": st.lists(
        st.sampled_from(["0", "1", "01", "00", "2147483647", "2147483648", "9999999999", "", " 2", GPU_UUID]),
        min_size=1,
        max_size=4,
    ),
}


@settings(max_examples=500)
@given(**_PLAIN_PARTS)
def test_the_plain_line_reader_agrees_with_the_full_checks(index, node, devices):
    text = f"{index}={node}:{','.join(devices)}"
    fast = _parse_plain_line(5, text)
    try:
        full = _parse_line(5, text)
    except MapLineError:
        full = None
    if fast is not None:
        assert fast == full
    # A valid line in the plain form (no spaces, ordinals, a node name rather than an alias
    # such as "Node1" or "a..b") is read by the fast reader, not left to the slow one.
    node_name = len(node) <= 253 and _DNS1123_SUBDOMAIN.fullmatch(node)
    if full is not None and " " not in text and GPU_UUID not in text and node_name:
        assert fast == full


def test_a_plain_map_and_the_same_map_with_spaces_parse_alike():
    plain = "\n".join(f"{i}=n{i % 7}:{i % 8},{(i + 1) % 8}" for i in range(200))
    spaced = "\n".join(f" {i} = n{i % 7} : {i % 8} , {(i + 1) % 8} " for i in range(200))
    assert parse(plain).to_json() == parse(spaced).to_json()


# Whole maps near the plain form: the whole-map reader must accept only maps the line-by-line
# checks accept, and read them the same way (entries, devices as written, line numbers).
_MAP_LINES = st.lists(
    st.one_of(
        st.builds(
            lambda index, node, devices: f"{index}={node}:{','.join(devices)}",
            _PLAIN_PARTS["index"],
            _PLAIN_PARTS["node"],
            _PLAIN_PARTS["devices"],
        ),
        st.sampled_from(["", "# comment", "1=node1:0\r", "4=node1:0", "4=node2:1", "5= node1:0"]),
    ),
    min_size=1,
    max_size=8,
)


@settings(max_examples=500)
@given(lines=_MAP_LINES, newline_at_end=st.booleans())
def test_the_whole_map_reader_agrees_with_the_line_by_line_checks(lines, newline_at_end):
    text = "\n".join(lines) + ("\n" if newline_at_end else "")
    fast = _read_plain_map(text)
    try:
        full = _parse_line_by_line(text)
    except InvalidMapError:
        full = None
    if fast is not None:
        assert full is not None, text
        assert dict(fast.items()) == dict(full.items()), text


def test_the_whole_map_reader_reads_the_maps_it_is_for():
    text = "".join(f"{i}=bn-{i % 100}:{i % 8}\n" for i in range(100))
    parsed = _read_plain_map(text)
    assert parsed is not None and len(parsed) == 100
    assert parsed[42] == MapEntry(index=42, node="bn-42", devices=("2",), line=43)
    assert _read_plain_map("0=node1:0,1\n1=node2:2") is not None  # no newline at the end
    # Anything else is left to the line-by-line checks, which say what is wrong.
    for text in ("0=node1:0\n\n1=node2:1\n", "# c\n0=node1:0\n", "0=node1:0\n0=node2:1\n", "0=Node1:0\n"):
        assert _read_plain_map(text) is None, text
    assert _read_plain_map("0=node1:1,01\n") is None  # one device twice
    assert _read_plain_map("2147483648=node1:0\n") is None
    assert _read_plain_map("0=node1:2147483648\n") is None
