"""Late interaction: a multi-vector (ColBERT-style) model's token vectors and exact MaxSim search in a memory budget.

A sentence-transformers ``MultiVectorEncoder`` turns a text into one vector per token (`token_matrices`). A query
scores a document by MaxSim: for each query token the largest dot product with any of the document's tokens, summed
over the query's tokens (``meanmaxsim`` models divide by the query's token count):

    MaxSim(q, d) = Σ_i max_j q_i · d_j

exactly as sentence-transformers' own ``maxsim`` scores (``util.similarity``: padding tokens excluded from the max,
a document with no token at ``-1e9``) and its ``MultiVectorInformationRetrievalEvaluator`` ranks.

`MaxSimSearch` meets the corpus block by block and never holds it: each block's scores are computed in float32 (one
matrix product of every query token with every document token of the block, then the maxima per document and the
sums per query), the documents that could enter a query's top `depth` (within a bound of float32's error of the cut)
are rescored in float64 and rounded to float32, and the running top is cut by the project's one rule
(`harness.records.top_scores`: scores as float32, then the greater doc_id). So a run is the same bits whatever the
block sizes, the memory budget or the order of the corpus, and equals a brute-force loop over every
(query, document) pair (tests/test_multivector.py).

`PassageMaxSim` scores documents by their passages (``--passages``): every (query, passage) pair in float64, rounded
to float32, each document's score from its passages' and the cut of every passage-scoring system
(`harness.retrieval.index.passages.document_scores`, `DocumentTop`; tests/test_multivector_passages.py).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness.errors import HarnessError, MissingDependencyError, ModelLoadError, setting
from harness.io.cache.texts import TextStore, encode_with_store
from harness.presentation import size_text
from harness.records import Run, top_scores
from harness.retrieval.index.passages import DocumentTop, document_scores, model_max_length, model_tokenizer
from harness.retrieval.streamed import SLACK_BYTES, MemoryBudgetError, default_budget, resident_bytes

if TYPE_CHECKING:
    import numpy as np

logger = logging.getLogger(__name__)

MULTI_VECTOR_TYPES = ("MultiVectorEncoder", "ColBERT")  # config_sentence_transformers.json's model_type (PyLate 3)
TOKEN_DTYPE = "float16"  # token vectors as the embedding store keeps them (exact in float32, the search's dtype)
EMPTY_DOCUMENT_SCORE = -1e9  # sentence-transformers' score of a document without a token: below every real one
ENCODE_CHUNK = 256  # documents encoded at once; their token matrices are held until searched
MAX_WORKING_BYTES = 256 << 20  # one block's float32 score matrix at most: larger blocks buy no speed
_EPS32 = 2.0**-24


def is_multi_vector_folder(folder: str | Path) -> bool:
    """Whether `folder` holds a multi-vector (late-interaction) model, as sentence-transformers marks one: its
    ``config_sentence_transformers.json`` declares ``model_type`` MultiVectorEncoder (ColBERT: a PyLate 3 save), or
    its ``modules.json`` lists a module of ``sentence_transformers.multi_vector_encoder``, or its ``config.json``
    names Stanford ColBERT's ``HF_ColBERT`` architecture. False for anything that is not a local folder."""
    path = Path(folder)
    if not path.is_dir():
        return False

    def read(name: str) -> Any:
        try:
            return json.loads((path / name).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None

    declared = (read("config_sentence_transformers.json") or {}).get("model_type")
    if declared in MULTI_VECTOR_TYPES:
        return True
    modules = read("modules.json")
    if isinstance(modules, list) and any(
        "multi_vector_encoder" in str(module.get("type", "")) for module in modules if isinstance(module, dict)
    ):
        return True
    config = read("config.json")
    return isinstance(config, dict) and "HF_ColBERT" in (config.get("architectures") or [])


def is_multi_vector_model(name: str) -> bool:
    """Whether the model `name` (a folder, or a hub id in the local cache) is a multi-vector one: the system
    registry's recognition of the ``multi-vector`` kind."""
    from harness.retrieval.models import model_folder

    return is_multi_vector_folder(model_folder(name))


def refuse_settings(config: Any) -> None:
    """Refuse, in one line naming the first, the settings of `config` (an ``EvaluateConfig``, read by its fields) a
    multi-vector model cannot honour, before anything loads: the dense encoder's truncation, normalization, prefixes,
    runtime and precision (the model's own modules and prompts decide its token vectors), an approximate index (the
    search is exact), several devices. (The dense vectors' compression is refused by the common checks.)

    Raises:
        HarnessError: Naming the setting and what to do.
    """
    from harness.retrieval.index import IndexSpec

    spec = config.encoder
    default = type(spec)()  # the encoder settings' own defaults
    given = [
        (name, getattr(spec, name))
        for name in ("max_seq_length", "normalize", "backend", "precision")
        if getattr(spec, name) != getattr(default, name)
    ] + [(name, getattr(spec, name)) for name in ("query_prefix", "doc_prefix") if getattr(spec, name)]
    if given:
        name, value = given[0]
        raise HarnessError(
            f"{setting(name)} {value!r} does not apply to a multi-vector model: its own settings decide its token "
            f"vectors (its saved prompts, query and document lengths, masks); drop {setting(name)}"
        )
    if config.index != IndexSpec():
        raise HarnessError(
            f"{setting('index')} {config.index.kind} does not apply to a multi-vector model: its token vectors are "
            f"searched exactly by MaxSim; drop {setting('index')}"
        )
    if "," in str(config.device or ""):
        raise HarnessError(
            f"a multi-vector model runs on one device, not {config.device}; give one (e.g. {setting('device')} cpu)"
        )


def identity(config: Any, default: Any) -> tuple[dict, dict]:
    """The decisive settings of a multi-vector first stage beside their defaults (the system registry's
    ``Kind.identity``): exact MaxSim over float16 token vectors; the encoder's own settings are refused, not
    recorded (`refuse_settings`)."""
    spec = {"scoring": "maxsim, exact", "token_dtype": TOKEN_DTYPE}
    settings = {"late_interaction": spec}
    if getattr(config, "passages", None) is not None:  # absent otherwise: a run without passages keeps its hash
        settings["passages"] = config.passages.to_config()
    return settings, {"late_interaction": dict(spec)}


def document_length(folder: str) -> int | None:
    """The tokens a multi-vector model reads of a document, from its folder (no weights loaded): its first module's
    ``document_length`` (``sentence_bert_config.json``), else its truncation length
    (`harness.retrieval.index.passages.model_max_length`). What a ``--passages`` window is checked against."""
    path = Path(folder)
    try:
        path = path / (json.loads((path / "modules.json").read_text(encoding="utf-8"))[0].get("path") or "")
        declared = json.loads((path / "sentence_bert_config.json").read_text(encoding="utf-8")).get("document_length")
    except (OSError, ValueError, IndexError, AttributeError):
        declared = None
    if isinstance(declared, int) and declared > 0:
        return declared
    return model_max_length(str(path), model_tokenizer(folder))


class MultiVectorModel:
    """A loaded ``MultiVectorEncoder``: its texts' token matrices (float32), and what decides them.

    Args:
        name: The model as named (recorded in results).
        source: What sentence-transformers loads (a folder, or a hub id in the local cache).
        device: A torch device.
        batch_size: Texts per forward pass.
    """

    def __init__(self, name: str, source: str, device: str = "cpu", batch_size: int = 32):
        try:
            from sentence_transformers import MultiVectorEncoder
        except ImportError as exc:  # pragma: no cover - sentence-transformers < 6
            raise MissingDependencyError(
                "late interaction needs sentence-transformers 6 or later (pip install -U sentence-transformers)"
            ) from exc
        try:
            self.model = MultiVectorEncoder(source, device=device)
        except Exception as exc:  # noqa: BLE001 - hub, IO and config errors have no common base
            detail = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise ModelLoadError(f"cannot load multi-vector model {name!r}: {detail[:300]}") from exc
        self.name, self.source, self.batch_size = name, source, batch_size
        self._fingerprint: dict[str, Any] | None = None

    @property
    def dimension(self) -> int:
        return int(self.model.get_embedding_dimension())

    @property
    def length_normalize(self) -> bool:
        """MeanMaxSim: the model divides a score by the query's token count."""
        return self.model.similarity_fn_name == "meanmaxsim"

    @property
    def device(self) -> str:
        return str(self.model.device)

    def settings(self) -> dict[str, Any]:
        """What the result records of how the model turns texts into token vectors (the model's own settings)."""
        transformer = self.model[0]
        return {
            "similarity": self.model.similarity_fn_name,
            "max_seq_length": getattr(transformer, "max_seq_length", None),
            "query_length": getattr(transformer, "query_length", None),
            "document_length": getattr(transformer, "document_length", None),
            "query_expansion": getattr(transformer, "query_expansion", None),
            "prompts": {role: text for role, text in (self.model.prompts or {}).items() if text},
        }

    def longest(self, role: str) -> int:
        """The most tokens a text of `role` (``query`` or ``document``) can have: its length limit, else the model's
        truncation length."""
        settings = self.settings()
        expansion = settings["query_expansion"]
        limit = settings[f"{role}_length"] or settings["max_seq_length"] or 512
        if role == "query" and isinstance(expansion, dict) and expansion.get("length"):
            limit = max(limit, int(expansion["length"]))
        return int(limit)

    def fingerprint(self) -> dict[str, Any]:
        """What decides the token vectors: a sha256 of the weights, the modules and the model's settings."""
        if self._fingerprint is None:
            from harness.retrieval.models import weights_sha256

            self._fingerprint = {
                "name": self.name,
                "weights_sha256": weights_sha256(self.model),
                "modules": [type(module).__name__ for module in self.model],
                **{key: value for key, value in self.settings().items() if key != "prompts"},
                "prompts": self.settings()["prompts"],
            }
        return self._fingerprint

    def encode(self, texts: Sequence[str], role: str) -> list[np.ndarray]:
        """One float32 (tokens, dim) matrix per text, as sentence-transformers' ``encode_query`` /
        ``encode_document`` return them with the model's own prompts, lengths and masks."""
        import numpy as np

        if not texts:
            return []
        encode = self.model.encode_query if role == "query" else self.model.encode_document
        out = encode(list(texts), batch_size=self.batch_size, show_progress_bar=False, convert_to_numpy=True)
        return [np.ascontiguousarray(matrix, dtype=np.float32) for matrix in out]


def token_matrices(
    model: MultiVectorModel, texts: Sequence[str], role: str, store: TextStore | None = None
) -> tuple[list[np.ndarray], int]:
    """(The token matrices of `texts`, ``query`` or ``document`` `role`, as float16; how many texts were encoded).

    The one place texts become token vectors: those the embedding store `store` holds (`harness.io.cache.texts`'s
    ragged store of this model and kind of text) come from it, the others are encoded once and stored. Without a
    store they are encoded and still held as float16, so a run's numbers do not depend on the cache."""
    import numpy as np

    matrices, encoded = encode_with_store(store, texts, lambda batch: model.encode(batch, role), None)
    return [np.asarray(matrix, dtype=np.float16) for matrix in matrices], encoded


def maxsim_exact(query: np.ndarray, docs: Sequence[np.ndarray], length_normalize: bool = False) -> np.ndarray:
    """MaxSim of one query with each document, in float64 and rounded to float32: the scores a run carries.

    A document with no token scores `EMPTY_DOCUMENT_SCORE` (and a query with none, 0), as sentence-transformers."""
    import numpy as np

    scores = np.full(len(docs), EMPTY_DOCUMENT_SCORE, dtype=np.float64)
    kept = [i for i, doc in enumerate(docs) if len(doc)]
    if kept and len(query):
        q64 = np.asarray(query, dtype=np.float64)
        stacked = np.concatenate([np.asarray(docs[i], dtype=np.float64) for i in kept])
        starts = np.cumsum([0] + [len(docs[i]) for i in kept[:-1]])
        scores[kept] = np.maximum.reduceat(q64 @ stacked.T, starts, axis=1).sum(axis=0)
    elif kept:
        scores[kept] = 0.0
    if length_normalize and len(query):
        scores /= len(query)
    return scores.astype(np.float32)


@dataclass(frozen=True)
class BlockPlan:
    """How a MaxSim search fits its memory budget: the query tokens and document tokens scored at once."""

    budget: int
    query_tokens: int
    doc_tokens: int
    minimum: int
    given: bool

    def record(self) -> dict[str, object]:
        return {
            "memory_budget": size_text(self.budget, places=2),
            "memory_budget_source": "option" if self.given else "default (half the memory available)",
            "block_query_tokens": self.query_tokens,
            "block_doc_tokens": self.doc_tokens,
        }


def plan_blocks(
    budget: int | None,
    query_tokens: int,
    longest_query: int,
    longest_doc: int,
    dimension: int,
    n_queries: int,
    depth: int,
    held_docs: int = ENCODE_CHUNK,
    base: int | None = None,
    scored_docs: int = 0,
) -> BlockPlan:
    """The largest blocks whose working set fits `budget` (bytes the whole process may hold; None: the default).

    Counted: what the process holds now (`base`), the query matrices, one chunk of `held_docs` documents' matrices
    waiting to be searched, the running top of every query and the run, and per block the float32 document tokens,
    the score matrix of query tokens × document tokens (twice: the maxima taken from it) and its float64 rescoring.
    Passages (`scored_docs` > 0: the passages a chunk holds): the queries in float64 too, and every query's scores
    with the chunk's passages and their documents (`PassageMaxSim`, whose float64 scores fit the same per-block
    count).

    Raises:
        MemoryBudgetError: Not even one query against one longest document fits (the minimum named).
    """
    given = budget is not None
    budget = budget if given else default_budget() or (4 << 30)
    base = resident_bytes() if base is None else base
    fixed = (
        base
        + query_tokens * dimension * (12 if scored_docs else 4)  # passages: float64 as well
        + held_docs * longest_doc * dimension * 4
        + n_queries * (depth + 1) * 200
        + n_queries * scored_docs * 8
        + SLACK_BYTES
    )
    per_pair = 8 + 8  # float32 score and its maximum; float64 on rescoring

    def working(q: int, d: int) -> int:
        return q * d * per_pair + d * dimension * 12

    minimum = fixed + working(longest_query, longest_doc)
    if budget < minimum:
        what = (
            f"{setting('memory_budget')} {size_text(budget, places=2)}"
            if given
            else f"the memory this process may use ({size_text(budget, places=2)})"
        )
        raise MemoryBudgetError(
            f"{what} is too small for a MaxSim search: one query against one {longest_doc}-token document, with "
            f"{held_docs} documents' token vectors held, needs at least {size_text(minimum, places=2)} "
            f"({size_text(base, places=2)} of it held already by this process); raise it to "
            f"{size_text(minimum, places=2)} or more"
        )
    room = min(budget - fixed, MAX_WORKING_BYTES)
    # every query token at once when half the room holds them against one longest document; the rest: documents
    q = max(longest_query, min(query_tokens, room // (2 * longest_doc * per_pair)))
    d = max(longest_doc, room // (q * per_pair + dimension * 12))
    return BlockPlan(budget, int(q), int(d), int(minimum), given)


def _blocks(lengths: Sequence[int], limit: int) -> list[slice]:
    """Consecutive items whose token counts add up to at most `limit` (at least one item a block)."""
    blocks, start, held = [], 0, 0
    for i, length in enumerate(lengths):
        if i > start and held + length > limit:
            blocks.append(slice(start, i))
            start, held = i, 0
        held += length
    if start < len(lengths):
        blocks.append(slice(start, len(lengths)))
    return blocks


def _stacked(docs: Sequence[np.ndarray], dtype) -> tuple[np.ndarray, np.ndarray, list[int]]:
    """The tokens of the `docs` that have any, one matrix in `dtype`; where each of them starts; which they are."""
    import numpy as np

    kept = [i for i, doc in enumerate(docs) if len(doc)]
    stacked = np.concatenate([np.asarray(docs[i], dtype=dtype) for i in kept]) if kept else np.empty((0, 0), dtype)
    return stacked, np.cumsum([0] + [len(docs[i]) for i in kept[:-1]]).astype(np.int64), kept


def _maxsim_block(
    all_queries: Sequence[np.ndarray], queries: range, stacked, starts, kept: list[int], n_docs: int, mean: bool
) -> np.ndarray:
    """MaxSim of `queries` (indices into `all_queries`) with a block of `n_docs` documents (`_stacked`), in the dtype
    of the token matrices: one product of all their tokens, the maxima per document (`np.maximum.reduceat` over each
    document's tokens), the sums per query (`mean`: divided by the query's tokens). A document without a token
    scores `EMPTY_DOCUMENT_SCORE`, a query without one 0 with every other document, as sentence-transformers."""
    import numpy as np

    dtype = stacked.dtype
    approx = np.full((len(queries), n_docs), EMPTY_DOCUMENT_SCORE, dtype=dtype)
    if mean:  # a document without a token: -1e9 divided as any score is
        approx /= np.array([max(1, len(all_queries[q])) for q in queries], dtype=dtype)[:, None]
    if not kept:
        return approx
    present = [q for q in queries if len(all_queries[q])]
    if len(present) < len(queries):  # a query without a token scores 0 with every document that has one
        approx[np.ix_([i for i, q in enumerate(queries) if not len(all_queries[q])], kept)] = 0.0
    if not present:
        return approx
    tokens = np.concatenate([all_queries[q] for q in present])
    maxima = np.maximum.reduceat(tokens @ stacked.T, starts, axis=1)
    bounds = np.cumsum([0] + [len(all_queries[q]) for q in present[:-1]]).astype(np.int64)
    sums = np.add.reduceat(maxima, bounds, axis=0)
    if mean:
        sums /= np.array([len(all_queries[q]) for q in present], dtype=dtype)[:, None]
    rows = [i for i, q in enumerate(queries) if len(all_queries[q])]
    approx[np.ix_(rows, kept)] = sums
    return approx


def _token_facts(queries: Sequence[np.ndarray], counts: Sequence[int], what: str) -> dict[str, object]:
    """The mean and largest token counts of the queries and of the texts searched (`what`: doc or passage)."""
    import numpy as np

    query_lengths = np.asarray([len(query) for query in queries] or [0])
    texts = np.asarray(counts or [0])
    return {
        "query_tokens_mean": round(float(query_lengths.mean()), 2),
        "query_tokens_max": int(query_lengths.max()),
        f"{what}_tokens_mean": round(float(texts.mean()), 2),
        f"{what}_tokens_max": int(texts.max()),
    }


class MaxSimSearch:
    """Exact MaxSim top `depth` of every query over documents added block by block (`add`), in bounded memory.

    Args:
        query_ids: The queries, in order.
        queries: Their token matrices (any float dtype).
        depth: Documents kept per query.
        length_normalize: MeanMaxSim (scores divided by the query's token count).
        query_tokens: Query tokens scored at once (a block holds at least one query).
        doc_tokens: Document tokens scored at once (a block holds at least one document).
    """

    def __init__(
        self,
        query_ids: Sequence[str],
        queries: Sequence[np.ndarray],
        depth: int,
        length_normalize: bool = False,
        query_tokens: int = 1 << 30,
        doc_tokens: int = 1 << 30,
    ):
        import numpy as np

        self.query_ids, self.depth, self.length_normalize = list(query_ids), depth, length_normalize
        self.queries = [np.asarray(query, dtype=np.float32) for query in queries]
        self.query_blocks = _blocks([max(1, len(q)) for q in self.queries], query_tokens)
        self.doc_tokens = doc_tokens
        # float32's error bound on a score, per unit of the documents' largest token norm (see `_candidates`)
        self._norms = [float(np.linalg.norm(q, axis=1).sum()) if len(q) else 0.0 for q in self.queries]
        self.top: list[dict[str, float]] = [{} for _ in self.query_ids]
        self.blocks = 0
        self.rescored = 0  # (query, document) pairs rescored in float64
        self.n_docs = 0
        self.doc_token_counts: list[int] = []

    def add(self, doc_ids: Sequence[str], docs: Sequence[np.ndarray]) -> None:
        """Search the documents `doc_ids` (their token matrices `docs`), in blocks of at most `doc_tokens` tokens."""
        self.n_docs += len(doc_ids)
        self.doc_token_counts.extend(len(doc) for doc in docs)
        for block in _blocks([max(1, len(doc)) for doc in docs], self.doc_tokens):
            self._add_block(list(doc_ids[block]), list(docs[block]))

    def _add_block(self, doc_ids: list[str], docs: list[np.ndarray]) -> None:
        import numpy as np
        from threadpoolctl import threadpool_limits

        self.blocks += 1
        stacked, starts, kept = _stacked(docs, np.float32)
        largest = float(np.linalg.norm(stacked, axis=1).max()) if kept else 0.0
        for block in self.query_blocks:
            which = range(len(self.queries))[block]
            approx = _maxsim_block(self.queries, which, stacked, starts, kept, len(docs), self.length_normalize)
            # The rescoring's products are small (one query's tokens by a few documents'): BLAS threads only cost
            # there (2.2x slower on 2 cores, 300 queries by 512 documents), unlike in the block's product above.
            with threadpool_limits(1, user_api="blas"):
                for row, q in enumerate(which):
                    self._merge(q, approx[row], doc_ids, docs, largest, stacked.shape[1] if kept else 0)

    def _merge(self, q: int, approx: np.ndarray, doc_ids, docs, largest: float, dimension: int) -> None:
        """Rescore (float64) the block's documents that could enter query `q`'s top, and cut it by the rule."""
        import numpy as np

        top, depth, query = self.top[q], self.depth, self.queries[q]
        # A float32 dot product of n terms is within n·2⁻²⁴·|q||d| of the exact one, a sum of m within m·2⁻²⁴ of it:
        # bound both the candidate's and the cut's estimate (×2) with room to spare (×2).
        margin = 4 * (dimension + len(query) + 2) * _EPS32 * self._norms[q] * largest
        if self.length_normalize and len(query):
            margin /= len(query)
        floor = -np.inf
        if len(approx) >= depth:
            floor = float(np.partition(approx, len(approx) - depth)[len(approx) - depth])
        if len(top) >= depth:
            floor = max(floor, min(top.values()))
        margin += 4 * _EPS32 * abs(floor) if np.isfinite(floor) else 0.0  # the float32 division of MeanMaxSim
        picked = np.flatnonzero(approx >= floor - margin) if np.isfinite(floor) else np.arange(len(approx))
        if not len(picked):
            return
        exact = maxsim_exact(query, [docs[i] for i in picked], self.length_normalize)
        self.rescored += len(picked)
        for i, score in zip(picked.tolist(), exact.tolist()):
            top[doc_ids[i]] = score
        if len(top) > depth:
            self.top[q] = top_scores(top, depth)

    def run(self, name: str = "run") -> Run:
        """The run: each query's top `depth`, scores as float32 values."""
        return Run.from_scores(dict(zip(self.query_ids, self.top)), name=name)

    def facts(self) -> dict[str, object]:
        """What the result records of the search: the token counts, the blocks, the pairs rescored."""
        return {
            **_token_facts(self.queries, self.doc_token_counts, "doc"),
            "search_blocks": self.blocks,
            "pairs_rescored_float64": self.rescored,
        }


class PassageMaxSim:
    """Documents scored by their passages (``--passages``): the exact MaxSim of every query with every passage (float64,
    rounded to float32, as `maxsim_exact`), each document's score from its passages' (`document_scores`: maxp,
    firstp, sump) and the documents cut to `depth` by the ranking rule (`DocumentTop`): the aggregation and the cut of
    every passage-scoring system. Fed chunk by chunk of whole documents (`add`), the passages scored in blocks of
    at most `doc_tokens` tokens against blocks of at most `query_tokens`.

    Args:
        how: ``maxp``, ``firstp`` or ``sump``.
        The others: as `MaxSimSearch`'s.
    """

    def __init__(
        self,
        query_ids: Sequence[str],
        queries: Sequence[np.ndarray],
        depth: int,
        how: str = "maxp",
        length_normalize: bool = False,
        query_tokens: int = 1 << 30,
        doc_tokens: int = 1 << 30,
    ):
        import numpy as np

        self.queries = [np.asarray(query, dtype=np.float64) for query in queries]
        self.query_blocks = _blocks([max(1, len(q)) for q in self.queries], query_tokens)
        self.how, self.length_normalize, self.doc_tokens = how, length_normalize, doc_tokens
        self.top = DocumentTop(query_ids, depth)
        self.blocks = 0
        self.passage_token_counts: list[int] = []

    def add(self, doc_ids: Sequence[str], starts: Sequence[int], passages: Sequence[np.ndarray]) -> None:
        """Score the documents `doc_ids`, whose passages' token matrices are `passages` (each document's contiguous,
        in order, from ``starts[d]`` on)."""
        import numpy as np

        self.passage_token_counts.extend(len(passage) for passage in passages)
        scores = np.empty((len(self.queries), len(passages)), dtype=np.float32)
        for block in _blocks([max(1, len(passage)) for passage in passages], self.doc_tokens):
            self.blocks += 1
            stacked, token_starts, kept = _stacked(passages[block], np.float64)
            for rows in self.query_blocks:
                which = range(len(self.queries))[rows]
                exact = _maxsim_block(
                    self.queries, which, stacked, token_starts, kept, block.stop - block.start, self.length_normalize
                )
                scores[rows, block] = exact.astype(np.float32)
        self.top.add(0, doc_ids, document_scores(scores, np.asarray(starts, dtype=np.int64), self.how))

    def run(self, name: str = "run") -> Run:
        """The run: each query's top `depth` documents."""
        return self.top.run(name)

    def facts(self) -> dict[str, object]:
        """What the result records of the search: the token counts (per passage), the blocks, the pairs scored."""
        return {
            **_token_facts(self.queries, self.passage_token_counts, "passage"),
            "search_blocks": self.blocks,
            "pairs_scored_float64": len(self.queries) * len(self.passage_token_counts),
        }
