"""Zero-shot cross-lingual transfer with LASER's MLDoc classifier protocol.

An MLP ``in -> 10 (tanh) -> 8 (tanh) -> C`` with dropout 0.2 on the input and after each hidden layer is
trained with Adam (lr 1e-3, batch 12) on one language's train split for a fixed number of epochs; the epoch
with the best dev accuracy of that same language is kept (ties go to the later epoch) and tested on every
language. All (seed, train language) classifiers are trained at once as one batched numpy model (stacked
weights, hand-written backward pass, dropout masks drawn once per epoch, single-threaded BLAS), which is several
times faster on CPU than torch autograd at these tiny sizes. Each seed has its own numpy random generator, so a seed's
result does not depend on which other seeds are run.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from sklearn.svm import LinearSVC
from threadpoolctl import threadpool_limits

Split = tuple[np.ndarray, np.ndarray]
"""``(embeddings (n, dim), integer labels (n,))``."""


CLASSIFIERS = ("mlp", "linear-svm")


@dataclass(frozen=True)
class ClassifierConfig:
    """Hyper-parameters of the MLDoc protocol (LASER defaults).

    ``kind="linear-svm"`` trains scikit-learn's ``LinearSVC`` (squared hinge, ``svm_c``) on each training language
    instead of LASER's MLP, as the NV/cNV papers' RCV1/RCV2 protocol does; it has no epochs (dev is not used).
    """

    kind: str = "mlp"
    svm_c: float = 1.0
    hidden: tuple[int, ...] = (10, 8)
    dropout: float = 0.2
    lr: float = 1e-3
    epochs: int = 500
    batch_size: int = 12


def select_epoch(dev_accuracy: np.ndarray) -> np.ndarray:
    """Index of the best epoch along axis 0 of a dev-accuracy curve; ties go to the later epoch."""
    curve = np.asarray(dev_accuracy)
    return curve.shape[0] - 1 - np.argmax(curve[::-1], axis=0)


_MASK_BITS = 65536  # dropout masks compare uint16 draws (fast) against round(p * 65536)


class _BatchedMLP:
    """``M`` independent tanh MLPs as stacked weights ``(M, fan_in, fan_out)``, trained with Adam in numpy.

    Forward/backward are written out by hand: autograd and per-call overhead dominate at these sizes.
    Parameters, gradients and Adam moments live in flat float32 buffers (one vectorised Adam update).
    """

    def __init__(self, n_models: int, sizes: list[int], rngs: list[np.random.Generator], lr: float):
        shapes = [s for fi, fo in zip(sizes[:-1], sizes[1:]) for s in ((n_models, fi, fo), (n_models, 1, fo))]
        total = sum(int(np.prod(s)) for s in shapes)
        self.flat, self.grad = np.zeros(total, np.float32), np.zeros(total, np.float32)
        self.m, self.v, self.tmp = (np.zeros(total, np.float32) for _ in range(3))
        self.params, self.grads, offset = [], [], 0
        for shape in shapes:
            size = int(np.prod(shape))
            self.params.append(self.flat[offset : offset + size].reshape(shape))
            self.grads.append(self.grad[offset : offset + size].reshape(shape))
            offset += size
        per_rng = n_models // len(rngs)
        for weight, bias in self.layers:  # torch.nn.Linear's default init: U(+-1/sqrt(fan_in))
            bound = 1.0 / np.sqrt(weight.shape[1])
            for p in (weight, bias):
                p[:] = np.concatenate([r.uniform(-bound, bound, (per_rng, *p.shape[1:])) for r in rngs])
        self.lr, self.t = lr, 0

    @property
    def layers(self) -> list[tuple[np.ndarray, np.ndarray]]:
        return list(zip(self.params[::2], self.params[1::2]))

    def forward(
        self, x: np.ndarray, masks: list[np.ndarray] | None = None, models: np.ndarray | None = None
    ) -> tuple[np.ndarray, list, list]:
        """Logits ``(M, n, C)``, each layer's input and each hidden tanh output.

        ``x`` is ``(M, n, dim)`` (one input per model) or ``(n, dim)`` shared by the models ``models`` (default:
        all; then the first layer is one matrix product). ``masks[i]`` (keep-masks scaled by 1/(1-p)) applies
        dropout to the input of layer i.
        """
        models = np.arange(len(self.params[0])) if models is None else models
        inputs, hidden = [], []
        for i, (weight, bias) in enumerate(self.layers):
            if masks is not None:
                x = x * masks[i]
            inputs.append(x)
            weight = weight if len(models) == len(weight) else weight[models]
            if x.ndim == 2:  # shared input: (n, dim) @ (dim, models * fan_out)
                flat = x @ weight.transpose(1, 0, 2).reshape(x.shape[1], -1)
                x = flat.reshape(x.shape[0], len(models), -1).transpose(1, 0, 2) + bias[models]
            else:
                x = x @ weight + bias[models]
            if i < len(self.layers) - 1:
                x = np.tanh(x)
                hidden.append(x)
        return x, inputs, hidden

    def accuracy(self, x: np.ndarray, y: np.ndarray, models: np.ndarray | None = None) -> np.ndarray:
        """Accuracy of each of ``models`` (default: all) on shared inputs ``x (n, dim)`` with labels ``y (n,)``."""
        return (self.forward(x, models=models)[0].argmax(-1) == y).mean(-1)

    def train_step(self, x: np.ndarray, y: np.ndarray, masks: list[np.ndarray], betas=(0.9, 0.999)) -> None:
        """One Adam step on the mean cross-entropy of each model's batch ``x (M, b, dim)``, ``y (M, b)``."""
        logits, inputs, hidden = self.forward(x, masks)
        probs = np.exp(logits - logits.max(-1, keepdims=True))
        probs /= probs.sum(-1, keepdims=True)
        rows, cols = np.indices(y.shape)
        probs[rows, cols, y] -= 1.0
        delta = probs / y.shape[1]  # d(mean CE)/d(logits)
        for i in reversed(range(len(self.layers))):
            weight = self.layers[i][0]
            np.matmul(inputs[i].transpose(0, 2, 1), delta, out=self.grads[2 * i])
            self.grads[2 * i + 1][:] = delta.sum(1, keepdims=True)
            if i > 0:
                delta = (delta @ weight.transpose(0, 2, 1)) * masks[i] * (1 - hidden[i - 1] ** 2)
        self.t += 1
        b1, b2 = betas
        tmp = self.tmp
        self.m *= b1
        np.multiply(self.grad, 1 - b1, out=tmp)
        self.m += tmp
        self.v *= b2
        np.multiply(self.grad, self.grad, out=tmp)
        tmp *= 1 - b2
        self.v += tmp
        np.multiply(self.v, 1 / (1 - b2**self.t), out=tmp)
        np.sqrt(tmp, out=tmp)
        tmp += 1e-8
        np.divide(self.m, tmp, out=tmp)
        tmp *= self.lr / (1 - b1**self.t)
        self.flat -= tmp


def _train_group(
    train: list[Split], dev: list[Split], n_classes: int, seeds: list[int], config: ClassifierConfig
) -> tuple[_BatchedMLP, np.ndarray, np.ndarray]:
    """Train one classifier per (seed, train split) at once; all splits must have equal sizes.

    Returns the model, its best-dev parameters (flat) and the dev curves ``(epochs, seeds * splits)``.
    """
    n_lang = len(train)
    rngs = [np.random.default_rng(s) for s in seeds]
    lang_of = np.tile(np.arange(n_lang), len(seeds))  # model m = seed m // n_lang, language m % n_lang
    x_train = np.stack([s[0] for s in train]).astype(np.float32)
    y_train = np.stack([s[1] for s in train]).astype(np.int64)
    n_models, (n_train, dim) = len(lang_of), x_train.shape[1:]
    sizes = [dim, *config.hidden, n_classes]
    mlp = _BatchedMLP(n_models, sizes, rngs, config.lr)
    keep = np.float32(1.0 / (1.0 - config.dropout))
    cut = round(config.dropout * _MASK_BITS)

    bounds = np.cumsum(sizes[:-1])[:-1]  # dropout masks of all layer inputs, drawn once per epoch
    best, curve = mlp.flat.copy(), np.zeros((config.epochs, n_models))
    best_rows = [p.reshape(n_models, -1) for p in np.split(best, np.cumsum([p.size for p in mlp.params])[:-1])]
    for epoch in range(config.epochs):
        order = np.concatenate([r.random((n_lang, n_train)) for r in rngs]).argsort(axis=1)
        shape = (n_lang, n_train, sum(sizes[:-1]))
        kept = np.concatenate([r.integers(0, _MASK_BITS, shape, np.uint16) >= cut for r in rngs])
        for start in range(0, n_train, config.batch_size):
            idx = order[:, start : start + config.batch_size]
            masks = np.split(kept[:, start : start + config.batch_size] * keep, bounds, axis=2)
            mlp.train_step(x_train[lang_of[:, None], idx], y_train[lang_of[:, None], idx], masks)
        for lang, (x_dev, y_dev) in enumerate(dev):
            models = np.flatnonzero(lang_of == lang)
            curve[epoch, models] = mlp.accuracy(np.asarray(x_dev, np.float32), np.asarray(y_dev), models)
        improved = select_epoch(curve[: epoch + 1]) == epoch
        for saved, p in zip(best_rows, mlp.params):
            saved[improved] = p.reshape(n_models, -1)[improved]
    return mlp, best, curve


def _summary(matrix: np.ndarray, train_langs: list[str], test_langs: list[str]) -> dict[str, float]:
    """``cross`` (train != test language), ``same`` (train == test) and ``all`` means of a matrix."""
    same = np.array([[a == b for b in test_langs] for a in train_langs])
    return {
        "cross": float(matrix[~same].mean()) if (~same).any() else float("nan"),
        "same": float(matrix[same].mean()) if same.any() else float("nan"),
        "all": float(matrix.mean()),
    }


@dataclass
class TransferResult:
    """Accuracy (%) of classifiers trained on ``train_langs`` (rows) and tested on ``test_langs`` (columns)."""

    train_langs: list[str]
    test_langs: list[str]
    seeds: list[int]
    per_seed: np.ndarray  # (seeds, train, test)
    best_epochs: np.ndarray  # (seeds, train), 1-based
    label_names: list[str] = field(default_factory=list)

    @property
    def mean(self) -> np.ndarray:
        return self.per_seed.mean(axis=0)

    @property
    def std(self) -> np.ndarray:
        return self.per_seed.std(axis=0)

    def summary(self) -> dict[str, tuple[float, float]]:
        """``{"cross"|"same"|"all": (mean, std over seeds)}``."""
        per_seed = [_summary(m, self.train_langs, self.test_langs) for m in self.per_seed]
        return {
            key: (float(np.mean([s[key] for s in per_seed])), float(np.std([s[key] for s in per_seed])))
            for key in ("cross", "same", "all")
        }

    def to_markdown(self) -> str:
        """Train x test table (mean ± std over seeds) followed by the summary numbers."""
        header = "| train \\ test | " + " | ".join(self.test_langs) + " |"
        lines = [header, "|---" * (len(self.test_langs) + 1) + "|"]
        for i, lang in enumerate(self.train_langs):
            cells = [f"{self.mean[i, j]:.2f} ± {self.std[i, j]:.2f}" for j in range(len(self.test_langs))]
            lines.append(f"| {lang} | " + " | ".join(cells) + " |")
        lines.append("")
        summary = self.summary()
        lines.append(", ".join(f"**{key}** {m:.2f} ± {s:.2f}" for key, (m, s) in summary.items()))
        lines.append(f"({len(self.seeds)} seeds: {self.seeds}; best dev epochs: {self.best_epochs.tolist()})")
        return "\n".join(lines)

    def to_dict(self) -> dict:
        """JSON-serialisable form."""
        return {
            "train_langs": self.train_langs,
            "test_langs": self.test_langs,
            "seeds": self.seeds,
            "mean": self.mean.tolist(),
            "std": self.std.tolist(),
            "per_seed": self.per_seed.tolist(),
            "best_epochs": self.best_epochs.tolist(),
            "summary": self.summary(),
            "label_names": self.label_names,
        }


def zero_shot_transfer(
    data: dict[str, dict[str, Split]],
    train_langs: list[str] | None = None,
    test_langs: list[str] | None = None,
    seeds: tuple[int, ...] | list[int] = (0, 1, 2, 3, 4),
    config: ClassifierConfig | None = None,
    label_names: list[str] | None = None,
) -> TransferResult:
    """Run the MLDoc protocol on embedded data ``{lang: {"train"|"dev"|"test": (X, y)}}``.

    Trains on each of ``train_langs`` (default: all), selects the epoch on that language's dev split and
    tests on every language of ``test_langs`` (default: all). Labels are integers in ``[0, C)``.
    """
    config = config or ClassifierConfig()
    if config.kind not in CLASSIFIERS:
        raise ValueError(f"classifier kind {config.kind!r}; expected one of {CLASSIFIERS}")
    langs = list(data)
    train_langs = list(train_langs or langs)
    test_langs = list(test_langs or langs)
    unknown = sorted({*train_langs, *test_langs} - set(langs))
    if unknown:
        raise ValueError(f"unknown language(s) {unknown}; data has {langs}")
    needed = [(lang, "train") for lang in train_langs] + [(lang, "dev") for lang in train_langs]
    needed += [(lang, "test") for lang in test_langs]
    for lang, split in needed:
        if split not in data[lang]:
            raise ValueError(f"data[{lang!r}] has no {split!r} split")
        x, y = data[lang][split]
        if len(x) != len(y):
            raise ValueError(f"data[{lang!r}][{split!r}]: {len(x)} embeddings but {len(y)} labels")
    n_classes = int(max(max(np.max(data[lang][s][1]) for s in ("train", "dev")) for lang in train_langs)) + 1
    if label_names is not None:
        n_classes = max(n_classes, len(label_names))

    seeds = [int(s) for s in seeds]
    per_seed = np.zeros((len(seeds), len(train_langs), len(test_langs)))
    best_epochs = np.zeros((len(seeds), len(train_langs)), dtype=int)
    groups: dict[tuple[int, int], list[int]] = {}
    for i, lang in enumerate(train_langs):
        groups.setdefault((len(data[lang]["train"][1]), len(data[lang]["dev"][1])), []).append(i)
    if config.kind == "linear-svm":
        for i, lang in enumerate(train_langs):
            for k, seed in enumerate(seeds):
                svm = LinearSVC(C=config.svm_c, random_state=seed).fit(*data[lang]["train"])
                for j, test in enumerate(test_langs):
                    x, y = data[test]["test"]
                    per_seed[k, i, j] = 100.0 * float(np.mean(svm.predict(np.asarray(x)) == np.asarray(y)))
        return TransferResult(train_langs, test_langs, seeds, per_seed, best_epochs, list(label_names or []))
    for members in groups.values():
        train = [data[train_langs[i]]["train"] for i in members]
        dev = [data[train_langs[i]]["dev"] for i in members]
        with threadpool_limits(1):  # the matrices are tiny: BLAS threads only add synchronisation
            mlp, best, curve = _train_group(train, dev, n_classes, seeds, config)
        mlp.flat[:] = best
        epochs = select_epoch(curve).reshape(len(seeds), len(members)) + 1
        best_epochs[:, members] = epochs
        for j, lang in enumerate(test_langs):
            x, y = data[lang]["test"]
            acc = mlp.accuracy(np.asarray(x, dtype=np.float32), np.asarray(y))
            per_seed[:, members, j] = 100.0 * acc.reshape(len(seeds), len(members))
    return TransferResult(train_langs, test_langs, seeds, per_seed, best_epochs, list(label_names or []))
