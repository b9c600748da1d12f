"""The generator's prompts: target source + instruction + knowledge + one-shot example.

``Task`` holds what every prompt needs; ``first`` is the paper's generation prompt, ``improve``
the optimizer's (ranked history, preceded by the reflection on a correct candidate or by the
debugging trap's fresh start). The retrieved example is picked by code similarity to the code
at hand: the target at first, the best candidate later.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from . import prompts
from agent.llm.retrieval import Corpus, example_text

DEFAULT_INSTRUCTION = ("Optimize `{symbol}` for speed on the device below. Keep its outputs exactly "
                       "as they are (within floating-point tolerance) for every input shape and dtype.")


@dataclass
class Task:
    path: str
    symbol: str
    source: str
    device: str
    knowledge: str
    knowledge_names: list[str] = field(default_factory=list)
    instruction: str = ""
    corpus: Optional[Corpus] = None

    def __post_init__(self):
        self.instruction = self.instruction or DEFAULT_INSTRUCTION.format(symbol=self.symbol)

    def block(self) -> str:
        return prompts.render("task", path=self.path, symbol=self.symbol, source=self.source.rstrip())

    def system(self) -> str:
        return prompts.render("system", symbol=self.symbol)

    def example(self, query: str) -> str:
        doc = self.corpus.best(query, exclude_texts=[self.source]) if self.corpus else None
        return example_text(doc) or "(no example in the corpus)"


def first(task: Task) -> str:
    return prompts.render("generate", instruction=task.instruction, device=task.device, task=task.block(),
                          knowledge=task.knowledge, example=task.example(task.source))


def improve(task: Task, history: str, preamble: str, query: str) -> str:
    return prompts.render("optimize", instruction=task.instruction, device=task.device, task=task.block(),
                          preamble=preamble, history=history, knowledge=task.knowledge,
                          example=task.example(query))
