"""cluster.storage on local temporary folders (s3:// only as far as parsing, which needs no network)."""

from __future__ import annotations

import os
from pathlib import Path

import pyarrow.fs as pafs
import pytest

from cluster.errors import StorageError, UserError
from cluster.storage import Storage, display_name, glob_to_regex, parse_uri, resolve_inputs, split_uri

SUFFIXES = (".pgn", ".pgn.zst")


@pytest.fixture(autouse=True)
def no_aws_network(monkeypatch: pytest.MonkeyPatch) -> None:
    # Building an S3FileSystem must not reach out for credentials or region.
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    for var in ("AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3"):
        monkeypatch.delenv(var, raising=False)


@pytest.fixture
def storage(tmp_path: Path) -> Storage:
    return Storage.from_uri(str(tmp_path))


def populate(storage: Storage) -> None:
    for rel in ["top.pgn", "a/x.pgn", "a/y.txt", "a/b/c.pgn", "a/b/d.pgn.zst", "a/b/e/f.pgn"]:
        storage.write_bytes(rel, rel.encode())


# ---------------------------------------------------------------------------------------------
# parse_uri


def test_local_path_becomes_absolute(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    fs, path, scheme = parse_uri("runs/demo")
    assert isinstance(fs, pafs.LocalFileSystem)
    assert (path, scheme) == (str(tmp_path / "runs" / "demo"), "")


def test_file_uri_with_an_absolute_path(tmp_path: Path) -> None:
    fs, path, scheme = parse_uri(f"file://{tmp_path}/x.pgn")
    assert isinstance(fs, pafs.LocalFileSystem)
    assert (path, scheme) == (str(tmp_path / "x.pgn"), "")


def test_file_uri_with_a_relative_path_is_an_error() -> None:
    with pytest.raises(StorageError) as info:
        parse_uri("file://data/games.pgn")
    assert str(info.value) == (
        "file:// URIs need an absolute path (file:///data/games.pgn), got 'file://data/games.pgn'"
    )


@pytest.mark.parametrize(
    "uri", ["s3://chess-runs/x", "s3://chess-runs/x/", "S3://chess-runs/x", "s3a://chess-runs/x"]
)
def test_s3_uri_gives_bucket_and_key(uri: str) -> None:
    fs, path, scheme = parse_uri(uri)
    assert isinstance(fs, pafs.S3FileSystem)
    assert (path, scheme) == ("chess-runs/x", "s3://")


def test_s3_storage_names_itself_with_the_scheme() -> None:
    storage = Storage.from_uri("s3://chess-runs/runs")
    assert (storage.uri, storage.is_local) == ("s3://chess-runs/runs", False)
    assert storage.uri_of("demo/prepare") == "s3://chess-runs/runs/demo/prepare"


@pytest.mark.parametrize("bucket", ["b", "ab", "Chess", "chess_runs", "-chess", "chess-", "a" * 64])
def test_invalid_s3_bucket_name_is_an_error(bucket: str) -> None:
    with pytest.raises(StorageError) as info:
        parse_uri(f"s3://{bucket}/x")
    assert str(info.value) == (
        f"invalid S3 bucket name {bucket!r} in 's3://{bucket}/x': 3-63 lowercase letters, digits, '.' or '-'"
    )


@pytest.mark.parametrize("bucket", ["abc", "chess.runs", "a" * 63, "123"])
def test_valid_s3_bucket_names(bucket: str) -> None:
    assert parse_uri(f"s3://{bucket}/k")[1] == f"{bucket}/k"


@pytest.mark.parametrize("uri", ["ftp://host/x.pgn", "gs://bucket/x", "https://example.com/x.pgn"])
def test_unsupported_scheme_lists_the_allowed_ones(uri: str) -> None:
    scheme = uri.split("://")[0]
    with pytest.raises(StorageError) as info:
        parse_uri(uri)
    assert (
        str(info.value)
        == f"unsupported URI scheme {scheme!r} in {uri!r}; allowed: local paths, file://, s3://"
    )
    assert isinstance(info.value, UserError) and isinstance(info.value, OSError)


@pytest.mark.parametrize("uri", ["", "   "])
def test_empty_uri_is_an_error(uri: str) -> None:
    with pytest.raises(StorageError, match="^empty storage path or URI"):
        parse_uri(uri)


def test_split_uri_gives_the_folder_storage_and_the_name(tmp_path: Path) -> None:
    folder, name = split_uri(str(tmp_path / "in" / "a.pgn"))
    assert (folder.root, name) == (str(tmp_path / "in"), "a.pgn")


# ---------------------------------------------------------------------------------------------
# reading and writing


def test_write_and_read_back(storage: Storage) -> None:
    storage.write_bytes("run/prepare/summary.json", b"{}")
    storage.write_text("run/notes.txt", "héllo")
    assert storage.read_bytes("run/prepare/summary.json") == b"{}"
    assert storage.read_text("run/notes.txt") == "héllo"
    assert storage.exists("run/prepare") and storage.is_dir("run/prepare")
    assert storage.exists("run/notes.txt") and not storage.is_dir("run/notes.txt")
    assert not storage.exists("run/nothing")


def test_write_replaces_the_whole_file(storage: Storage) -> None:
    storage.write_bytes("f.bin", b"a long first version")
    storage.write_bytes("f.bin", b"short")
    assert storage.read_bytes("f.bin") == b"short"


def test_reading_a_missing_file_names_it(storage: Storage) -> None:
    with pytest.raises(StorageError) as info:
        storage.read_bytes("nope.json")
    assert str(info.value) == f"no such file: {storage.root}/nope.json"


def test_atomic_output_writes_through_a_temporary_file(storage: Storage, tmp_path: Path) -> None:
    with storage.atomic_output("out/data.bin") as handle:
        handle.write(b"part one, ")
        assert not (tmp_path / "out" / "data.bin").exists()  # nothing visible yet
        handle.write(b"part two")
    assert storage.read_bytes("out/data.bin") == b"part one, part two"
    assert sorted(os.listdir(tmp_path / "out")) == ["data.bin"]


def test_failure_inside_atomic_output_leaves_no_file_and_no_temp_file(
    storage: Storage, tmp_path: Path
) -> None:
    with pytest.raises(RuntimeError, match="boom"), storage.atomic_output("out/data.bin") as handle:
        handle.write(b"half a file")
        raise RuntimeError("boom")
    assert os.listdir(tmp_path / "out") == []


def test_failure_inside_atomic_output_keeps_the_old_file(storage: Storage, tmp_path: Path) -> None:
    storage.write_bytes("out/data.bin", b"old")
    with pytest.raises(KeyboardInterrupt), storage.atomic_output("out/data.bin") as handle:
        handle.write(b"new but unfinished")
        raise KeyboardInterrupt
    assert storage.read_bytes("out/data.bin") == b"old"
    assert os.listdir(tmp_path / "out") == ["data.bin"]


def test_upload_file_copies_a_local_file(storage: Storage, tmp_path: Path) -> None:
    source = tmp_path / "local.bin"
    source.write_bytes(b"\x00\x01" * 1000)
    storage.upload_file(source, "up/copy.bin")
    assert storage.read_bytes("up/copy.bin") == b"\x00\x01" * 1000


def test_child_storage_is_rooted_below(storage: Storage) -> None:
    child = storage.child("demo/prepare")
    child.write_bytes("games/part-0.parquet", b"x")
    assert storage.list_files() == ["demo/prepare/games/part-0.parquet"]
    assert child.list_files() == ["games/part-0.parquet"]
    assert child.uri == f"{storage.root}/demo/prepare"


# ---------------------------------------------------------------------------------------------
# listing, globs, deleting


def test_list_files_is_recursive_sorted_and_relative_to_the_root(storage: Storage) -> None:
    populate(storage)
    assert storage.list_files() == [
        "a/b/c.pgn",
        "a/b/d.pgn.zst",
        "a/b/e/f.pgn",
        "a/x.pgn",
        "a/y.txt",
        "top.pgn",
    ]
    assert storage.list_files("a/b") == ["a/b/c.pgn", "a/b/d.pgn.zst", "a/b/e/f.pgn"]
    assert storage.list_files("missing") == []


@pytest.mark.parametrize(
    ("pattern", "matches"),
    [
        ("*.pgn", ["top.pgn"]),  # '*' stays in its folder
        ("a/*.pgn", ["a/x.pgn"]),
        ("a/*", ["a/x.pgn", "a/y.txt"]),
        ("*/*.pgn", ["a/x.pgn"]),
        ("a/**/*.pgn", ["a/b/c.pgn", "a/b/e/f.pgn", "a/x.pgn"]),  # '**' crosses folders, even none
        ("**/*.pgn", ["a/b/c.pgn", "a/b/e/f.pgn", "a/x.pgn", "top.pgn"]),
        ("a/**", ["a/b/c.pgn", "a/b/d.pgn.zst", "a/b/e/f.pgn", "a/x.pgn", "a/y.txt"]),
        ("**/*.pgn.zst", ["a/b/d.pgn.zst"]),
        ("a/?.pgn", ["a/x.pgn"]),
        ("a/[xz].pgn", ["a/x.pgn"]),
        ("a/[!x].*", ["a/y.txt"]),
        ("a/b/c.pgn", ["a/b/c.pgn"]),  # no magic: the file itself
        ("a/b/zzz.pgn", []),
        ("a/b", []),  # a folder is not a file
        ("nothing/**/*.pgn", []),
    ],
)
def test_glob(storage: Storage, pattern: str, matches: list[str]) -> None:
    populate(storage)
    assert storage.glob(pattern) == matches


def test_glob_regex_corners() -> None:
    assert glob_to_regex("a.pgn").fullmatch("a.pgn")
    assert not glob_to_regex("a.pgn").fullmatch("aXpgn")  # '.' is literal
    assert glob_to_regex("[ab").fullmatch("[ab")  # an unclosed '[' is literal
    assert not glob_to_regex("*.pgn").fullmatch("x/y.pgn")
    assert glob_to_regex("**/*.pgn").fullmatch("y.pgn")


def test_delete_a_file_a_folder_and_nothing(storage: Storage) -> None:
    populate(storage)
    storage.delete("top.pgn")
    storage.delete("a/b")
    storage.delete("not/there")
    assert storage.list_files() == ["a/x.pgn", "a/y.txt"]


@pytest.mark.parametrize("rel", ["..", "../x", "a/../../x", "a/..", "/../x", "a/b/../../../etc/passwd"])
def test_paths_escaping_the_root_are_rejected(storage: Storage, rel: str) -> None:
    with pytest.raises(StorageError) as info:
        storage.path(rel)
    assert str(info.value) == f"path escapes its storage root: {rel.strip('/')!r}"
    with pytest.raises(StorageError, match="escapes"):
        storage.write_bytes(rel, b"x")


def test_paths_inside_the_root(storage: Storage) -> None:
    assert storage.path() == storage.root
    assert storage.path("/a/b/") == f"{storage.root}/a/b"
    assert storage.path("a/..b") == f"{storage.root}/a/..b"


# ---------------------------------------------------------------------------------------------
# resolve_inputs


def test_resolve_a_file(storage: Storage) -> None:
    populate(storage)
    assert resolve_inputs([f"{storage.root}/a/y.txt"], SUFFIXES) == [
        (f"{storage.root}/a/y.txt", f"{storage.root}/a/y.txt")
    ]  # a file named on purpose is taken whatever its suffix


def test_resolve_a_folder_keeps_the_suffixes_recursively(storage: Storage) -> None:
    populate(storage)
    storage.write_bytes("a/.partial.pgn", b"")  # hidden files are left out
    found = [uri for uri, _ in resolve_inputs([f"{storage.root}/a"], SUFFIXES)]
    root = storage.root
    assert found == [f"{root}/a/b/c.pgn", f"{root}/a/b/d.pgn.zst", f"{root}/a/b/e/f.pgn", f"{root}/a/x.pgn"]


def test_resolve_a_glob_takes_what_matches(storage: Storage) -> None:
    populate(storage)
    found = [uri for uri, _ in resolve_inputs([f"{storage.root}/a/*/*.pgn*"], SUFFIXES)]
    assert found == [f"{storage.root}/a/b/c.pgn", f"{storage.root}/a/b/d.pgn.zst"]


def test_resolve_file_uris(storage: Storage) -> None:
    populate(storage)
    assert resolve_inputs([f"file://{storage.root}/top.pgn"], SUFFIXES) == [
        (f"{storage.root}/top.pgn", f"{storage.root}/top.pgn")
    ]


def test_resolve_drops_duplicates_keeping_the_first_order(storage: Storage) -> None:
    populate(storage)
    root = storage.root
    found = resolve_inputs(
        [f"{root}/a/x.pgn", f"{root}/a", f"file://{root}/a/x.pgn", f"{root}/a/*.pgn"], SUFFIXES
    )
    uris = [uri for uri, _ in found]
    assert uris == [f"{root}/a/x.pgn", f"{root}/a/b/c.pgn", f"{root}/a/b/d.pgn.zst", f"{root}/a/b/e/f.pgn"]
    assert len(set(uris)) == len(uris)


def test_resolve_shows_local_files_relative_to_the_working_dir(
    storage: Storage, monkeypatch: pytest.MonkeyPatch
) -> None:
    populate(storage)
    monkeypatch.chdir(storage.root)
    assert resolve_inputs(["a/x.pgn"], SUFFIXES) == [(f"{storage.root}/a/x.pgn", "a/x.pgn")]
    assert display_name("s3://bucket/k.pgn") == "s3://bucket/k.pgn"
    assert display_name("/elsewhere/k.pgn") == "/elsewhere/k.pgn"


def test_resolve_a_missing_path_is_an_error(storage: Storage) -> None:
    spec = f"{storage.root}/missing.pgn"
    with pytest.raises(StorageError) as info:
        resolve_inputs([spec], SUFFIXES)
    assert str(info.value) == f"no such file or folder: {spec!r}"


def test_resolve_a_folder_without_pgn_files_is_an_error(storage: Storage) -> None:
    storage.makedirs("empty")
    storage.write_bytes("notes/readme.txt", b"")
    for folder in ("empty", "notes"):
        spec = f"{storage.root}/{folder}"
        with pytest.raises(StorageError) as info:
            resolve_inputs([spec], SUFFIXES)
        assert str(info.value) == f"no .pgn or .pgn.zst files in folder {spec!r}"


def test_resolve_a_glob_matching_nothing_is_an_error(storage: Storage) -> None:
    populate(storage)
    spec = f"{storage.root}/**/*.cbv"
    with pytest.raises(StorageError) as info:
        resolve_inputs([spec], SUFFIXES)
    assert str(info.value) == f"no files match {spec!r}"


def test_resolve_a_bad_uri_is_an_error() -> None:
    with pytest.raises(StorageError, match="unsupported URI scheme 'ftp'"):
        resolve_inputs(["ftp://host/x.pgn"], SUFFIXES)


def test_resolve_the_shipped_test_data() -> None:
    data = Path(__file__).resolve().parents[1] / "data" / "pgn"
    names = [Path(uri).name for uri, _ in resolve_inputs([str(data)], SUFFIXES)]
    assert "Ding.pgn.zst" in names and "lichess-2021-10-sample.pgn" in names
    assert all(name.endswith(SUFFIXES) for name in names)


def test_an_s3_bucket_is_reached_in_its_own_region_unless_one_is_named(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A bucket in us-west-2 read through a us-east-1 client fails: without AWS_REGION the region
    is asked of AWS, once per bucket (stood in for here: no network in tests); a named region is
    never looked up."""
    import pyarrow.fs as pafs

    from cluster import storage

    asked: list[str] = []

    def resolve(bucket: str) -> str:
        asked.append(bucket)
        return "us-west-2"

    monkeypatch.setattr(pafs, "resolve_s3_region", resolve)
    monkeypatch.setattr(storage, "_BUCKET_REGIONS", {})
    for var in ("AWS_REGION", "AWS_DEFAULT_REGION", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3"):
        monkeypatch.delenv(var, raising=False)
    assert storage.s3_filesystem("chess-runs").region == "us-west-2"
    assert storage.s3_filesystem("chess-runs").region == "us-west-2" and asked == ["chess-runs"]
    monkeypatch.setenv("AWS_DEFAULT_REGION", "eu-central-1")
    assert storage.s3_filesystem("other-bucket").region == "eu-central-1" and asked == ["chess-runs"]


def test_a_us_west_2_bucket_on_a_real_endpoint_is_found_in_its_region_and_every_path_works(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """moto's S3 server on loopback, a bucket created in us-west-2, no region in the environment:
    the endpoint is asked (as AWS is) and answers us-west-2; writes, reads, listings, globs,
    deletes, uploads and Parquet through the storage's filesystem all work there."""
    import boto3
    import pyarrow as pa
    import pyarrow.parquet as pq
    from moto.server import ThreadedMotoServer

    from cluster import storage as storage_module

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    try:
        host, port = server.get_host_and_port()
        for var in ("AWS_REGION", "AWS_DEFAULT_REGION"):
            monkeypatch.delenv(var, raising=False)
        monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://{host}:{port}")
        monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
        monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
        monkeypatch.setattr(storage_module, "_BUCKET_REGIONS", {})
        s3 = boto3.client("s3", region_name="us-west-2", endpoint_url=f"http://{host}:{port}")
        s3.create_bucket(Bucket="west-runs", CreateBucketConfiguration={"LocationConstraint": "us-west-2"})
        boto3.client("s3", region_name="us-east-1", endpoint_url=f"http://{host}:{port}").create_bucket(
            Bucket="east-runs"
        )

        root = Storage.from_uri("s3://west-runs/runs")
        assert root.fs.region == "us-west-2"
        assert Storage.from_uri("s3://east-runs/runs").fs.region == "us-east-1"
        root.write_text("demo/prepare/summary.json", "{}")
        assert root.read_text("demo/prepare/summary.json") == "{}"
        assert root.exists("demo/prepare") and root.is_dir("demo/prepare")
        (tmp_path / "games.pgn").write_text("1. e4 e5 *\n")
        root.upload_file(tmp_path / "games.pgn", "input/games.pgn")
        with root.open_input("input/games.pgn") as handle:
            assert handle.read() == b"1. e4 e5 *\n"
        with root.atomic_output("demo/sft/shard-0.parquet") as handle:
            pq.write_table(pa.table({"ply": [1, 2]}), handle)
        table = pq.read_table(root.path("demo/sft/shard-0.parquet"), filesystem=root.fs)
        assert table.column("ply").to_pylist() == [1, 2]
        assert root.glob("demo/**/*.json") == ["demo/prepare/summary.json"]
        assert sorted(root.list_files("demo")) == ["demo/prepare/summary.json", "demo/sft/shard-0.parquet"]
        root.delete("demo/sft")
        assert not root.exists("demo/sft/shard-0.parquet")
        assert s3.get_bucket_location(Bucket="west-runs")["LocationConstraint"] == "us-west-2"
    finally:
        server.stop()
