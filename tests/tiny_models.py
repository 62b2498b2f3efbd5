"""Tiny BERT models with random weights and a word-level vocabulary, saved as the folders the real loading code
reads (a sentence-transformers bi-encoder, a cross-encoder, a SPLADE-style sparse encoder): no download.

Each builder seeds torch with `seed` first (``None``: the caller's generator goes on, so models built one after
another get the weights they always had) and takes the sizes a test depends on; attention heads are 2 and the
feed-forward width twice the hidden size. ``init=None`` keeps BERT's own initializer range (0.02)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

SPECIALS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")


def bert_config(
    words: Sequence[str],
    *,
    hidden: int = 32,
    layers: int = 2,
    positions: int = 128,
    init: float | None = 0.5,
    labels: int | None = None,
):
    from transformers import BertConfig

    settings = {"num_labels": labels} if labels is not None else {}
    if init is not None:
        settings["initializer_range"] = init
    return BertConfig(
        vocab_size=len(SPECIALS) + len(words),
        hidden_size=hidden,
        num_hidden_layers=layers,
        num_attention_heads=2,
        intermediate_size=2 * hidden,
        max_position_embeddings=positions,
        **settings,
    )


def save_tokenizer(folder: Path, words: Sequence[str]) -> None:
    from transformers import BertTokenizerFast

    vocab = [*SPECIALS, *words]
    BertTokenizerFast(vocab={word: i for i, word in enumerate(vocab)}).save_pretrained(folder)


def _seed(seed: int | None) -> None:
    if seed is not None:
        import torch

        torch.manual_seed(seed)


def bi_encoder(
    folder: Path,
    words: Sequence[str],
    *,
    hidden: int = 32,
    layers: int = 2,
    positions: int = 128,
    init: float | None = 0.5,
    max_seq_length: int = 32,
    normalize: bool = False,
    prompts: dict[str, str] | None = None,
    seed: int | None = 0,
) -> Path:
    """A BERT bi-encoder (mean pooling; normalized if asked) saved at `folder`; its bare BERT beside it
    (``<folder>-raw``)."""
    from sentence_transformers import SentenceTransformer, models
    from transformers import BertModel

    raw = folder.parent / f"{folder.name}-raw"
    _seed(seed)
    BertModel(bert_config(words, hidden=hidden, layers=layers, positions=positions, init=init)).save_pretrained(raw)
    save_tokenizer(raw, words)
    modules = [models.Transformer(str(raw), max_seq_length=max_seq_length), models.Pooling(hidden, "mean")]
    if normalize:
        modules.append(models.Normalize())
    SentenceTransformer(modules=modules, prompts=prompts or None).save(str(folder))
    return folder


def cross_encoder(folder: Path, words: Sequence[str], *, labels: int = 1, seed: int | None = 0, **sizes) -> Path:
    """A BERT sequence classifier of `labels` outputs saved at `folder` (`sizes`: those of `bert_config`)."""
    from transformers import BertForSequenceClassification

    _seed(seed)
    BertForSequenceClassification(bert_config(words, labels=labels, **sizes)).save_pretrained(folder)
    save_tokenizer(folder, words)
    return folder


def sparse_encoder(
    folder: Path, words: Sequence[str], *, raw: Path | None = None, seed: int | None = 0, **sizes
) -> Path:
    """A SPLADE-style sparse encoder (BERT's masked-language-model head, max pooling) saved at `folder`; its bare
    model at `raw` (default ``<folder>-raw``; `sizes`: those of `bert_config`)."""
    from sentence_transformers import SparseEncoder
    from transformers import BertForMaskedLM

    try:  # sentence-transformers 6 moved the modules; 5 has them under .models
        from sentence_transformers.sparse_encoder.modules import MLMTransformer, SpladePooling
    except ImportError:
        from sentence_transformers.sparse_encoder.models import MLMTransformer, SpladePooling

    raw = raw or folder.parent / f"{folder.name}-raw"
    _seed(seed)
    BertForMaskedLM(bert_config(words, **sizes)).save_pretrained(raw)
    save_tokenizer(raw, words)
    modules = [MLMTransformer(str(raw)), SpladePooling(pooling_strategy="max")]
    SparseEncoder(modules=modules, device="cpu").save(str(folder))
    return folder


def multi_vector_encoder(
    folder: Path,
    words: Sequence[str],
    *,
    normalize: bool = True,
    similarity: str = "maxsim",
    prompts: dict[str, str] | None = None,
    max_seq_length: int = 32,
    seed: int | None = 0,
    **sizes,
) -> Path:
    """A late-interaction (ColBERT-style) BERT saved at `folder` as a sentence-transformers ``MultiVectorEncoder``:
    its token vectors, the scoring mask, and (`normalize`) each token vector L2-normalized; scored by `similarity`
    (``maxsim`` or ``meanmaxsim``). Its bare BERT beside it (``<folder>-raw``; `sizes`: those of `bert_config`)."""
    from sentence_transformers import MultiVectorEncoder
    from sentence_transformers.base.modules import Normalize, Transformer
    from sentence_transformers.multi_vector_encoder.modules import MultiVectorMask
    from transformers import BertModel

    raw = folder.parent / f"{folder.name}-raw"
    _seed(seed)
    BertModel(bert_config(words, **sizes)).save_pretrained(raw)
    save_tokenizer(raw, words)
    modules = [Transformer(str(raw), max_seq_length=max_seq_length), MultiVectorMask()]
    if normalize:
        modules.append(Normalize(module_input_name="token_embeddings"))
    MultiVectorEncoder(modules=modules, prompts=prompts or None, similarity_fn_name=similarity, device="cpu").save(
        str(folder)
    )
    return folder
