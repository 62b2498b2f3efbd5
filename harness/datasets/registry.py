"""The BEIR dataset registry: a data table shipped in ``harness/data/beir-datasets.csv``.

One row per BEIR dataset: eval split, query and document counts, archive size and md5,
whether it is publicly distributed, its sub-corpora (CQADupStack's 12 forums), and its self-hit policy (``ignore_identical_ids``: the
datasets whose queries are themselves corpus documents, where a document with the query's
own id must be dropped from the ranking, as BEIR and MTEB do).
"""

from __future__ import annotations

import csv
import difflib
import functools
import importlib.resources
from dataclasses import dataclass

from harness.errors import DatasetError


@dataclass(frozen=True)
class DatasetSpec:
    """One row of the BEIR dataset table."""

    name: str
    eval_split: str
    n_queries: int
    n_docs: int
    avg_rel_per_query: float | None
    zip_mb: float | None
    md5: str | None
    public: bool
    ignore_identical_ids: bool
    note: str
    subsets: tuple[str, ...] = ()
    mteb_task: str = ""  # MTEB's task name ("" when MTEB has none); forums: see `mteb_task`
    family: str = "BEIR"  # or "NanoBEIR": the 13 official small subsets (`nanobeir`)
    mteb_split: str = ""  # MTEB's name of the evaluation split when it differs (NanoBEIR: "train")

    @property
    def zip_bytes(self) -> int | None:
        """Approximate archive size in bytes (the table gives MB to one decimal)."""
        return int(self.zip_mb * 1_000_000) if self.zip_mb else None


def _yes(value: str, column: str, name: str) -> bool:
    if value not in ("yes", "no"):
        raise ValueError(f"beir-datasets.csv: {name}: {column} must be yes or no, got {value!r}")
    return value == "yes"


@functools.cache
def datasets() -> dict[str, DatasetSpec]:
    """All registry rows by name, in the table's order."""
    text = importlib.resources.files("harness").joinpath("data/beir-datasets.csv").read_text(encoding="utf-8")
    specs: dict[str, DatasetSpec] = {}
    for row in csv.DictReader(text.splitlines()):
        name = row["name"]
        if name in specs:
            raise ValueError(f"beir-datasets.csv: duplicate dataset {name!r}")
        specs[name] = DatasetSpec(
            name=name,
            eval_split=row["eval_split"],
            n_queries=int(row["queries"]),
            n_docs=int(row["corpus_docs"]),
            avg_rel_per_query=float(row["avg_rel_per_query"]) if row["avg_rel_per_query"] else None,
            zip_mb=float(row["zip_mb"]) if row["zip_mb"] else None,
            md5=row["md5"] or None,
            public=_yes(row["public"], "public", name),
            ignore_identical_ids=_yes(row["ignore_identical_ids"], "ignore_identical_ids", name),
            note=row["note"],
            subsets=tuple(row["subsets"].split(";")) if row.get("subsets") else (),
            mteb_task=row.get("mteb_task", ""),
        )
    return specs


def get(name: str) -> DatasetSpec:
    """The registry row for `name`.

    Raises:
        DatasetError: Unknown name; the message suggests close names.
    """
    spec = lookup(name)
    if spec is not None:
        return spec
    raise DatasetError(f"unknown BEIR dataset {name!r} ({suggest(name)})")


def suggest(name: str) -> str:
    """``did you mean ...?`` with the closest registry names, or the list of all of them."""
    specs = datasets()
    close = difflib.get_close_matches(name, list(specs), n=3)
    return f"did you mean {', '.join(close)}?" if close else f"known: {', '.join(specs)}"


def lookup(name: str) -> DatasetSpec | None:
    """The registry row for `name` (a BEIR dataset, ``nanobeir`` or ``nanobeir/<name>``), or None."""
    return datasets().get(name) or nanobeir().get(name)


NANOBEIR = "nanobeir"
NANO_TABLES = ("docs", "queries", "qrels")


@dataclass(frozen=True)
class NanoFile:
    """One parquet file of a NanoBEIR dataset: where it is, its md5 and its row count (as ir_datasets records them)."""

    url: str
    md5: str
    rows: int

    @property
    def path(self) -> str:
        """The file's path inside its Hugging Face repository (``corpus/train-00000-of-00001.parquet``)."""
        return self.url.split("/resolve/main/", 1)[-1]


@functools.cache
def nanobeir_files() -> dict[str, dict[str, NanoFile]]:
    """NanoBEIR dataset name → table (docs, queries, qrels) → its file, from ``harness/data/nanobeir.csv``."""
    text = importlib.resources.files("harness").joinpath("data/nanobeir.csv").read_text(encoding="utf-8")
    files: dict[str, dict[str, NanoFile]] = {}
    for row in csv.DictReader(text.splitlines()):
        table = files.setdefault(row["dataset"], {})
        if row["table"] not in NANO_TABLES or row["table"] in table:
            raise ValueError(f"nanobeir.csv: {row['dataset']}: unknown or repeated table {row['table']!r}")
        table[row["table"]] = NanoFile(row["url"], row["md5"], int(row["rows"]))
    return files


@functools.cache
def nanobeir() -> dict[str, DatasetSpec]:
    """``nanobeir`` (its 13 datasets as subsets, like CQADupStack's forums) and each ``nanobeir/<name>``, with
    the counts of its files and its full dataset's self-hit policy; evaluated on ``qrels/test.tsv``."""
    specs = {}
    for name, tables in nanobeir_files().items():
        full = datasets()[name]
        repo = tables["docs"].url.split("/datasets/", 1)[-1].split("/")[1]  # zeta-alpha-ai/NanoSciFact → NanoSciFact
        specs[f"{NANOBEIR}/{name}"] = DatasetSpec(
            name=f"{NANOBEIR}/{name}",
            eval_split="test",
            n_queries=tables["queries"].rows,
            n_docs=tables["docs"].rows,
            avg_rel_per_query=round(tables["qrels"].rows / tables["queries"].rows, 2),
            zip_mb=None,
            md5=None,
            public=True,
            ignore_identical_ids=full.ignore_identical_ids,
            note=f"NanoBEIR: {tables['queries'].rows} queries of {name} over {tables['docs'].rows:,} documents",
            mteb_task=f"{repo}Retrieval",
            family="NanoBEIR",
            mteb_split="train",
        )
    children = list(specs.values())
    return {
        NANOBEIR: DatasetSpec(
            name=NANOBEIR,
            eval_split="test",
            n_queries=sum(s.n_queries for s in children),
            n_docs=sum(s.n_docs for s in children),
            avg_rel_per_query=None,
            zip_mb=None,
            md5=None,
            public=True,
            ignore_identical_ids=False,
            note="the 13 NanoBEIR datasets; bench reports their mean",
            subsets=tuple(s.name.split("/", 1)[1] for s in children),
            family="NanoBEIR",
        ),
        **specs,
    }


def mteb_task(dataset: str) -> str | None:
    """MTEB's task name for a registry dataset (``fiqa`` → ``FiQA2018``; a CQADupStack forum
    ``cqadupstack/android`` → ``CQADupstackAndroidRetrieval``), or None when MTEB has no such task."""
    own = lookup(dataset)
    if own is not None and "/" in dataset:
        return own.mteb_task or None  # nanobeir/scifact → NanoSciFactRetrieval
    name, _, forum = dataset.partition("/")
    spec = lookup(name)
    if spec is None or not spec.mteb_task:
        return None
    if forum:
        return f"CQADupstack{forum.capitalize()}Retrieval" if forum in spec.subsets else None
    return spec.mteb_task


def mteb_split_name(dataset: str, split: str) -> str:
    """The name MTEB gives `split` of `dataset`: NanoBEIR's evaluation split is ``train`` there (the Hugging
    Face split of its files), ``test`` here; every other split keeps its name."""
    spec = lookup(dataset)
    return spec.mteb_split if spec is not None and spec.mteb_split and split == spec.eval_split else split


def from_mteb_task(task: str) -> str | None:
    """The registry dataset of an MTEB task name, case-insensitively (``SciFact`` → ``scifact``,
    ``CQADupstackGisRetrieval`` → ``cqadupstack/gis``), or None."""
    wanted = task.strip().lower()
    for spec in nanobeir().values():
        if spec.mteb_task and spec.mteb_task.lower() == wanted:
            return spec.name
    for spec in datasets().values():
        if spec.mteb_task.lower() == wanted:
            return spec.name
        for forum in spec.subsets:
            if mteb_task(f"{spec.name}/{forum}").lower() == wanted:
                return f"{spec.name}/{forum}"
    return None


def subset_mean(name: str, values: dict[str, float | None]) -> tuple[float | None, list[str]]:
    """The score of a dataset made of sub-corpora (CQADupStack): the mean of its subsets' scores, as BEIR
    and MTEB report it (not the mean over the pooled queries).

    Args:
        name: The registry name (``cqadupstack``).
        values: Subset name → its score (None when it has none).

    Returns:
        (the mean, or None when any subset lacks a score; the subsets lacking one, in registry order).
    """
    subsets = get(name).subsets
    missing = [subset for subset in subsets if values.get(subset) is None]
    return (None if missing else sum(values[subset] for subset in subsets) / len(subsets)), missing


def count_mismatch(name: str, split: str, n_docs: int, n_queries: int) -> str:
    """Why a folder evaluated under the registry name `name` is not the registry's dataset, or "".

    Compares its documents, and its judged queries when `split` is the registry's evaluation split, with the
    registry's counts; names with sub-corpora (``cqadupstack``) and names the registry does not know pass.
    """
    spec = lookup(name)
    if spec is None or spec.subsets:
        return ""
    mine, theirs = [f"{n_docs:,} documents"], [f"{spec.n_docs:,}"]
    if split == spec.eval_split:
        mine.append(f"{n_queries:,} judged {split} queries")
        theirs.append(f"{spec.n_queries:,}")
    if (n_docs, n_queries if split == spec.eval_split else spec.n_queries) == (spec.n_docs, spec.n_queries):
        return ""
    return (
        f"this folder has {' and '.join(mine)}, the registry's {name} has {' and '.join(theirs)}: its numbers "
        f"are not comparable with published {name} scores (give the folder another name to evaluate it as a "
        "custom dataset)"
    )
