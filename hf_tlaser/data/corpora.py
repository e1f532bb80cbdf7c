"""Registry of the corpora in the data dir (see its INDEX.md), corpus specs resolved to their sources, and the
training mix loader."""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import datasets
from transformers import PreTrainedTokenizerBase

from hf_tlaser.data.cleaning import CleaningConfig, clean_groups
from hf_tlaser.data.languages import ISO639_3, LANGUAGES, normalize_language
from hf_tlaser.data.paths import ENV_VAR, get_data_dir
from hf_tlaser.data.pivot import join_on_english
from hf_tlaser.data.readers import moses_files
from hf_tlaser.data.source_datasets import read_source
from hf_tlaser.data.sources import (
    KINDS,
    AlignedPart,
    CsvPart,
    Part,
    Source,
    parse_spec,
    split_specs,
)
from hf_tlaser.data.xed import XED_MORE_LANGUAGES, xed_more_parts, xed_parts
from hf_tlaser.errors import MissingDataError, UsageError

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class CorpusSpec:
    """One folder of the data dir: ``parts(folder)`` lists its file sets. ``evaluation`` corpora are loadable by
    name (and are retrieval sets of ``hf-tlaser evaluate``) but never in the default training mix."""

    name: str
    description: str
    parts: Callable[[Path], list[Part]]
    evaluation: bool = False
    folder: str | None = None
    """the folder of the data dir, when it is not ``name``"""


def _multiway(name: str, set_names: Sequence[str], langs: Sequence[str]) -> Callable[[Path], list[Part]]:
    """Sets ``<set>.<lang>`` aligned across languages (the files that exist)."""

    def parts(folder: Path) -> list[Part]:
        sets = {s: {lang: folder / f"{s}.{lang}" for lang in langs} for s in set_names}
        return [
            AlignedPart(f"{name}/{s}", {lang: str(path) for lang, path in files.items() if path.exists()})
            for s, files in sets.items()
        ]

    return parts


def _bilingual(name: str) -> Callable[[Path], list[Part]]:
    """English-centric bitexts ``<set>.<xx>-en.{xx,en}``."""

    def parts(folder: Path) -> list[Part]:
        out = []
        for en_file in sorted(folder.glob("*.*-en.en")):
            prefix = en_file.name[: -len(".en")]  # e.g. newstest2014.de-en
            other = prefix.rsplit(".", 1)[1].split("-")[0]
            out.append(AlignedPart(f"{name}/{prefix}", {other: str(folder / f"{prefix}.{other}"), "en": str(en_file)}))
        return out

    return parts


def _stsb(folder: Path) -> list[Part]:
    files = {lang: str(folder / f"stsb-{lang}-train.csv") for lang in LANGUAGES}
    return [CsvPart("stsb-multi-mt/train", files, columns=(0, 1))]


NTREX_LANGUAGES: tuple[str, ...] = ("cs", "de", "en", "es", "fi", "fr", "it", "ru", "tr", "zh")
NTREX_FILES: dict[str, str] = {
    lang: "newstest2019-src.eng.txt" if lang == "en" else f"newstest2019-ref.{ISO639_3[lang]}.txt"
    for lang in NTREX_LANGUAGES
} | {"zh": "newstest2019-ref.zho-CN.txt"}
"""NTREX-128 file of each language in ``ntrex128/`` (Chinese: simplified, zho-CN)."""
FLORES_CODES: dict[str, str] = dict(
    item.split("=")
    for item in (
        "af=afr_Latn ak=aka_Latn am=amh_Ethi ar=arb_Arab as=asm_Beng ay=ayr_Latn az=azj_Latn ba=bak_Cyrl "
        "be=bel_Cyrl bg=bul_Cyrl bm=bam_Latn bn=ben_Beng bo=bod_Tibt bs=bos_Latn ca=cat_Latn cs=ces_Latn "
        "cy=cym_Latn da=dan_Latn de=deu_Latn dz=dzo_Tibt ee=ewe_Latn el=ell_Grek en=eng_Latn eo=epo_Latn "
        "es=spa_Latn et=est_Latn eu=eus_Latn fa=pes_Arab ff=fuv_Latn fi=fin_Latn fj=fij_Latn fo=fao_Latn "
        "fr=fra_Latn ga=gle_Latn gd=gla_Latn gl=glg_Latn gn=grn_Latn gu=guj_Gujr ha=hau_Latn he=heb_Hebr "
        "hi=hin_Deva hr=hrv_Latn ht=hat_Latn hu=hun_Latn hy=hye_Armn id=ind_Latn ig=ibo_Latn is=isl_Latn "
        "it=ita_Latn ja=jpn_Jpan jv=jav_Latn ka=kat_Geor kg=kon_Latn ki=kik_Latn kk=kaz_Cyrl km=khm_Khmr "
        "kn=kan_Knda ko=kor_Hang ku=kmr_Latn ky=kir_Cyrl lb=ltz_Latn lg=lug_Latn li=lim_Latn ln=lin_Latn "
        "lo=lao_Laoo lt=lit_Latn lv=lvs_Latn mg=plt_Latn mi=mri_Latn mk=mkd_Cyrl ml=mal_Mlym mn=khk_Cyrl "
        "mr=mar_Deva ms=zsm_Latn mt=mlt_Latn my=mya_Mymr nb=nob_Latn ne=npi_Deva nl=nld_Latn nn=nno_Latn "
        "no=nob_Latn ny=nya_Latn oc=oci_Latn om=gaz_Latn or=ory_Orya pa=pan_Guru pl=pol_Latn ps=pbt_Arab "
        "pt=por_Latn qu=quy_Latn rn=run_Latn ro=ron_Latn ru=rus_Cyrl rw=kin_Latn sa=san_Deva sc=srd_Latn "
        "sd=snd_Arab sg=sag_Latn si=sin_Sinh sk=slk_Latn sl=slv_Latn sm=smo_Latn sn=sna_Latn so=som_Latn "
        "sq=als_Latn sr=srp_Cyrl ss=ssw_Latn st=sot_Latn su=sun_Latn sv=swe_Latn sw=swh_Latn ta=tam_Taml "
        "te=tel_Telu tg=tgk_Cyrl th=tha_Thai ti=tir_Ethi tk=tuk_Latn tl=tgl_Latn tn=tsn_Latn tr=tur_Latn "
        "ts=tso_Latn tt=tat_Cyrl tw=twi_Latn ug=uig_Arab uk=ukr_Cyrl ur=urd_Arab uz=uzn_Latn vi=vie_Latn "
        "wo=wol_Latn xh=xho_Latn yi=ydd_Hebr yo=yor_Latn zh=zho_Hans zu=zul_Latn"
    ).split()
)
"""The FLORES-200 variety an ISO 639-1 code stands for (``flores-devtest/<code>.devtest``). Where FLORES-200 has
several varieties of one ISO 639-1 language, the standard written one: ar Modern Standard Arabic (arb_Arab), az North
Azerbaijani (azj_Latn), fa Iranian Persian (pes_Arab), ku Northern Kurdish (kmr_Latn), ms Standard Malay (zsm_Latn),
zh Simplified Chinese (zho_Hans); ks and kr (two scripts each) are left out: give their FLORES code. ISO 639-1
codes without a FLORES-200 variety (br, fy, la, ...) are not here."""
FLORES_FILES: dict[str, str] = {lang: f"{FLORES_CODES[lang]}.devtest" for lang in NTREX_LANGUAGES}
"""FLORES-200 file of each of the ten languages (the ``flores-devtest`` corpus; ``hf-tlaser evaluate`` reads every
file, ``flores_file``)."""
_FLORES_CODE = re.compile(r"^[a-z]{3}(_[A-Z][a-z]{3})?$")
_FLORES_ALIAS = re.compile(r"^([a-z]{3}(?:_[A-Z][a-z]{3})?)\.devtest$")


def is_flores_language(code: str) -> bool:
    """Whether ``code`` can name a FLORES-200 file without looking at the folder: an ISO 639-1 code of
    ``FLORES_CODES`` or a FLORES-style code (``swh_Latn``, ``swh``); ``flores_file`` finds (or refuses) the file."""
    return code in FLORES_CODES or bool(_FLORES_CODE.match(code))


def flores_file(folder: str | os.PathLike, code: str) -> Path:
    """The FLORES-200 devtest file of ``code`` in ``folder``: an ISO 639-1 code through ``FLORES_CODES``, a FLORES
    code (``swh_Latn``), or an ISO 639-3 code with one variety in the folder (``swh``). The folder's alias files
    (``ara``, ``msa``, ``cmn_Hans``...: one line naming another file, as git writes a symbolic link) are followed.
    MissingDataError naming the code when there is no such file."""
    folder = Path(folder)
    stem = FLORES_CODES.get(code, code)
    path = folder / f"{stem}.devtest"
    if not path.is_file() and "_" not in stem:
        found = sorted(folder.glob(f"{stem}_*.devtest"))
        if len(found) == 1:
            path = found[0]
        elif found:
            names = ", ".join(p.stem for p in found)
            raise MissingDataError(f"flores-devtest: {code!r} has several varieties ({names}); give one of them")
    if not path.is_file():
        raise MissingDataError(
            f"flores-devtest: no file for {code!r} ({path.name} is not in {folder}); give an ISO 639-1 code with a "
            "FLORES-200 variety or a FLORES-200 code such as swh_Latn (the folder's file names)"
        )
    if path.stat().st_size < 64:  # an alias: the name of the file it stands for
        target = _FLORES_ALIAS.match(path.read_text(encoding="utf-8").strip())
        if target and (folder / target.group(0)).is_file():
            return folder / target.group(0)
    return path


def flores_languages(folder: str | os.PathLike) -> list[str]:
    """The FLORES-200 codes of the folder's files (aliases included), sorted."""
    return sorted(path.stem for path in Path(folder).glob("*.devtest"))


REGISTRY: dict[str, CorpusSpec] = {
    spec.name: spec
    for spec in (
        CorpusSpec(
            "wmt-newstest-multiway",
            "WMT news test 2008-2011, 2013; multi-way de/en/es/fr (+it in 2009 sets)",
            _multiway(
                "wmt-newstest-multiway",
                ("news-test2008", "newssyscomb2009", "newstest2009", "newstest2010", "newstest2011", "newstest2013"),
                LANGUAGES,
            ),
        ),
        CorpusSpec(
            "europarl-v2-it-en",
            "Europarl it-en 1996-2001 (693,793 pairs, tokenised)",
            lambda folder: [
                AlignedPart(
                    "europarl-v2-it-en/europarl.it-en",
                    {lang: str(path) for lang, path in moses_files(folder / "europarl.it-en", ("it", "en")).items()},
                )
            ],
        ),
        CorpusSpec(
            "multi30k",
            "Multi30k task 1 train split, en/de/fr image captions (non-commercial)",
            lambda folder: [
                AlignedPart(
                    "multi30k/train", {lang: str(folder / f"task1-raw/train.{lang}.gz") for lang in ("de", "en", "fr")}
                )
            ],
        ),
        CorpusSpec(
            "wmt-newstest-bilingual",
            "WMT news test de-en 2014-2018, fr-en 2014/2015",
            _bilingual("wmt-newstest-bilingual"),
        ),
        CorpusSpec(
            "wmt-newstest-more",
            "WMT news test cs/ru/zh/tr/fi-en 2008-2020 (no 2012, no 2019: NTREX-128's English), Latin, Cyrillic, Han",
            _bilingual("wmt-newstest-more"),
        ),
        CorpusSpec("stsb-multi-mt", "STS benchmark train split, en + DeepL MT de/es/fr/it (both sentences)", _stsb),
        CorpusSpec(
            "xed",
            "XED OpenSubtitles en-X pairs (de/es/fr/it), the xed-dev films left out; conflicts with XED as a benchmark",
            xed_parts,
        ),
        CorpusSpec(
            "xed-more",
            "OpenSubtitles en-X pairs of xed-subtitles-more, cs/fi/ru/tr/zh (conversational), xed-dev films left out",
            xed_more_parts(XED_MORE_LANGUAGES),
            folder="xed-subtitles-more",
        ),
        CorpusSpec(
            "xed-more-all",
            "OpenSubtitles en-X pairs of xed-subtitles-more, its 30 languages (ar bg bs cs da el ...), xed-dev films "
            "left out",
            xed_more_parts(None),
            folder="xed-subtitles-more",
        ),
        CorpusSpec(
            "tico19-test",
            "TICO-19 test, COVID domain, en/es/fr 3-way (evaluation: a default retrieval set of hf-tlaser evaluate)",
            _multiway("tico19-test", ("tico19-test",), ("en", "es", "fr")),
            evaluation=True,
        ),
        CorpusSpec(
            "ntrex128",
            "NTREX-128, 1,997 news sentences, 10-way: de en es fr it cs ru zh tr fi (evaluation)",
            lambda folder: [
                AlignedPart("ntrex128/newstest2019", {lang: str(folder / f) for lang, f in NTREX_FILES.items()})
            ],
            evaluation=True,
        ),
        CorpusSpec(
            "ud-pud",
            "Parallel UD treebanks, 1,000 sentences, 5-way (evaluation)",
            lambda folder: [AlignedPart("ud-pud/pud", {lang: str(folder / f"pud.{lang}.txt") for lang in LANGUAGES})],
            evaluation=True,
        ),
        CorpusSpec(
            "flores-devtest",
            "FLORES-200 devtest, 1,012 sentences, 204-way (as a corpus: the ten languages of ntrex128); overlaps "
            "SIB-200 (evaluation)",
            lambda folder: [
                AlignedPart("flores-devtest/devtest", {lang: str(folder / f) for lang, f in FLORES_FILES.items()})
            ],
            evaluation=True,
        ),
    )
}

EVALUATION_CORPORA: tuple[str, ...] = tuple(name for name, spec in REGISTRY.items() if spec.evaluation)
DEFAULT_TRAIN_CORPORA: tuple[str, ...] = (
    "wmt-newstest-multiway",
    "europarl-v2-it-en",
    "multi30k",
    "wmt-newstest-bilingual",
    "stsb-multi-mt",
)
"""Training mix. ``xed`` is registered but left out: its pairs are the source of the XED benchmark's
projections (PROVENANCE: use it as training bitext or as benchmark, not both); the ``evaluation`` corpora (TICO-19
included, a retrieval set of ``hf-tlaser evaluate``) never enter it."""


def resolve_corpora(specs: str | Iterable[str | Source], data_dir: str | os.PathLike | None = None) -> list[Source]:
    """Corpus specs (``hf_tlaser.data.sources``; comma-separated or a list) -> their Sources, checked without reading
    any text: UsageError naming an unknown corpus or a malformed spec, MissingDataError naming a missing data dir,
    corpus folder or file."""
    items = [specs] if isinstance(specs, (str, Source)) else list(specs)
    sources = []
    for item in items:
        if isinstance(item, Source):
            sources.append(item)
            continue
        for spec in split_specs(item):
            if spec in REGISTRY:
                entry = REGISTRY[spec]
                folder = get_data_dir(data_dir) / (entry.folder or spec)
                if not folder.is_dir():
                    raise MissingDataError(
                        f"corpus folder {folder} does not exist; pass --data-dir (or set ${ENV_VAR}) to the folder "
                        "that holds the corpora (see its INDEX.md)"
                    )
                parts = [part for part in entry.parts(folder) if len(part.languages) >= 2]
                sources.append(Source(spec, spec, parts, entry.evaluation))
            elif ":" in spec:
                sources.append(parse_spec(spec))
            else:
                raise UsageError(
                    f"unknown corpus {spec!r}; known corpora: {', '.join(REGISTRY)}; or a spec KIND:WHERE "
                    f"({', '.join(f'{kind}:' for kind in KINDS)}; see docs/data.md)"
                )
    if not sources:
        raise UsageError("no corpus given")
    for source in sources:
        source.check()
    return sources


def corpus_languages(sources: Sequence[Source]) -> list[str]:
    """The languages of the corpora (sorted): what the default curriculum and the tokenizer cover."""
    return sorted({lang for source in sources for lang in source.languages})


def load_corpus(
    name: str | Source,
    data_dir: str | os.PathLike | None = None,
    languages: Sequence[str] | None = None,
    max_lines: int | None = None,
) -> datasets.Dataset:
    """Raw (uncleaned) groups of one corpus (registered name or spec), columns ``languages`` (default: the corpus's
    languages) and ``corpus``; ``max_lines`` reads only the first lines of each file."""
    (source,) = resolve_corpora([name], data_dir)
    languages = source.languages if languages is None else [normalize_language(lang) for lang in languages]
    parts = read_source(source, languages, max_lines)
    if not parts:
        raise ValueError(f"corpus {source.name!r} has fewer than two of the languages {list(languages)}")
    return datasets.concatenate_datasets(parts) if len(parts) > 1 else parts[0]


def load_corpora(
    names: str | Iterable[str | Source] = DEFAULT_TRAIN_CORPORA,
    data_dir: str | os.PathLike | None = None,
    languages: Sequence[str] | None = None,
    *,
    cleaning: CleaningConfig | None = None,
    tokenizer: PreTrainedTokenizerBase | None = None,
    join_english: bool = True,
    max_lines: int | None = None,
) -> datasets.Dataset:
    """Load, pivot-join (``join_on_english``) and clean (``clean_groups``) the corpora into one dataset.

    ``names``: registered names or specs (``resolve_corpora``). Columns: one per language in ``languages`` (default:
    every language of the corpora; None where a group has no such sentence) and ``corpus``. Corpora with fewer than
    two of ``languages`` are skipped with a warning. ``tokenizer`` makes the length filter count subword tokens.
    ``max_lines`` reads only the first lines of every file (quick runs and tests).
    """
    sources = resolve_corpora(names, data_dir)
    languages = corpus_languages(sources) if languages is None else [normalize_language(x) for x in languages]
    parts = []
    for source in sources:
        found = read_source(source, languages, max_lines)
        if not found:
            logger.warning("skipping %s: fewer than two of the languages %s", source.name, list(languages))
        logger.info("%s: %d groups", source.name, sum(len(part) for part in found))
        parts.extend(found)
    if not parts:
        raise ValueError(f"none of the corpora {[s.spec for s in sources]} has two of the languages {list(languages)}")
    ds = datasets.concatenate_datasets(parts)
    if join_english and "en" in languages:
        ds = join_on_english(ds, languages)
    ds, _ = clean_groups(ds, cleaning, languages, tokenizer)
    return ds


def corpus_sentences(
    names: str | Iterable[str | Source],
    data_dir: str | os.PathLike | None = None,
    languages: Sequence[str] | None = None,
    max_sentences: int | None = None,
) -> Iterator[tuple[str, str]]:
    """``(language, sentence)`` of the corpora's non-empty raw sentences, language by language, at most
    ``max_sentences`` per language (tokenizer training)."""
    sources = resolve_corpora(names, data_dir)
    languages = corpus_languages(sources) if languages is None else list(languages)
    ds = datasets.concatenate_datasets([load_corpus(source, data_dir, languages) for source in sources])
    for lang in languages:
        count = 0
        for batch in ds.select_columns([lang]).iter(batch_size=10_000):
            for text in batch[lang]:
                if text and (max_sentences is None or count < max_sentences):
                    count += 1
                    yield lang, text
            if max_sentences is not None and count >= max_sentences:
                break


def corpus_texts(
    names: str | Iterable[str | Source],
    data_dir: str | os.PathLike | None = None,
    languages: Sequence[str] | None = None,
    max_sentences: int | None = None,
) -> Iterator[str]:
    """The sentences of ``corpus_sentences`` without their language."""
    return (text for _, text in corpus_sentences(names, data_dir, languages, max_sentences))
