"""The Chinese edition: notebooks/zh/NN_name.ipynb, built from the English notebook and the
translations in translations/zh/NN_name.po (a gettext catalogue).

Only the prose is written by hand. Each piece of English prose in a notebook is a unit: a
markdown cell, a block of comment lines in a code cell, or a docstring. Its catalogue entry holds
the English text (msgid), the id of the cell it comes from (msgctxt) and the Chinese (msgstr).
The build copies the English notebook (cells, ids, code, outputs, metadata) and puts each unit's
Chinese where the English was; code outside comments and docstrings is never touched.

When an English unit changes, its catalogue entry no longer matches: `check` names the cell and
shows what changed in the English (against the entry of the same cell that no longer matches),
and `update` adds the new text to the catalogue marked fuzzy, the old Chinese kept as a start.

    python tools/zh_edition.py build    # write notebooks/zh/ (make zh)
    python tools/zh_edition.py update   # bring the catalogues up to the English (make zh-update)
    python tools/zh_edition.py check    # list what is missing, out of date or breaks a rule

Each takes chapter numbers to do only those: `python tools/zh_edition.py check 01 02`.
"""

import ast
import copy
import difflib
import io
import re
import sys
import tokenize
from dataclasses import dataclass
from pathlib import Path

import mistune
import nbformat
import polib

ROOT = Path(__file__).resolve().parents[1]
ENGLISH = ROOT / "notebooks"
CHINESE = ENGLISH / "zh"
CATALOGUES = ROOT / "translations" / "zh"

# An English word, not part of a name in code (d_model, nn.Linear, x2): what makes text prose.
WORD = re.compile(r"(?<![\w.])[A-Za-z]{2,}(?![\w(])")
# Two English words in a row: a comment without them is notation ("d loss / d x",
# "(B,) or (B, q)"), which its translation may keep as it is.
PROSE_RUN = re.compile(r"(?<![\w.])[A-Za-z]{2,}[ ,-]+[A-Za-z]{2,}(?![\w(])")
SHAPE = re.compile(r"\([^()]*\)")  # (batch, heads, queries, keys): kept as it is in comments
# Five English words in a row left in a translation: a sentence not translated.
UNTRANSLATED = re.compile(r"[A-Za-z]+(?:[ ,'-]+[A-Za-z]+){4,}")
CJK = re.compile(r"[\u3400-\u9fff]")
MARKERS = re.compile(r"^\s*(NBVAL_|noqa|type:|fmt:|pragma)")  # comments for tools, kept as they are
# Formulas and code spans, either of which markdown lets run on over one line break
FORMULA = re.compile(r"\$\$.+?\$\$|\$(?:[^$\n]|\n(?!\n))+?\$", re.DOTALL)
CODE_SPAN = re.compile(r"``.+?``|`(?:[^`\n]|\n(?!\n))+?`")
LINK = re.compile(r"\[([^\]]*)\]\(([^)\s]+)\)")
NUMBER = re.compile(r"(?<![\w.])\d+(?:[.,]\d+)*(?![\w])")
SAME_TEXT = 0.5  # an entry whose English is this alike to a unit's is that unit before a change
HEADING = re.compile(r"^(#{1,6}) ", re.MULTILINE)


@dataclass(frozen=True)
class Unit:
    """A piece of English prose in a notebook: a markdown cell, a comment block or a docstring."""

    cell: int  # the cell's index in the notebook
    cell_id: str
    kind: str  # "markdown", "comment" (lines of their own), "trailing comment" or "docstring"
    text: str  # the English, as the catalogue's msgid holds it
    span: tuple = ()  # where it sits in the cell's source: (first line, last line, column)

    def where(self) -> str:
        return f"cell {self.cell} (id {self.cell_id}), {self.kind}"


# Finding the prose


def notebook_units(notebook) -> list[Unit]:
    """Every unit of English prose in the notebook, in reading order."""
    units = []
    for index, cell in enumerate(notebook.cells):
        if cell.cell_type == "markdown" and is_prose(cell.source, "markdown"):
            units.append(Unit(index, cell.id, "markdown", cell.source))
        elif cell.cell_type == "code":
            units += comment_units(index, cell) + docstring_units(index, cell)
    return units


def comment_units(index: int, cell) -> list[Unit]:
    """A cell's comments with prose in them: lines of comments on their own, one unit per block
    of consecutive lines at one column, and each comment after code on its line."""
    lines = cell.source.split("\n")
    comments = [
        token
        for token in tokenize.generate_tokens(io.StringIO(cell.source).readline)
        if token.type == tokenize.COMMENT and not MARKERS.match(token.string[1:])
    ]
    units, block = [], []
    for token in comments + [None]:
        if token is not None:
            row, column = token.start
            alone = not lines[row - 1][:column].strip()
            follows = block and block[-1].start == (row - 1, column)
            if alone and (not block or follows):
                block.append(token)
                continue
        if block:
            units.append(_comment_unit(index, cell.id, "comment", block))
        block = []
        if token is not None:
            if alone:
                block = [token]
            else:
                units.append(_comment_unit(index, cell.id, "trailing comment", [token]))
    return [unit for unit in units if is_prose(unit.text, unit.kind)]


def _comment_unit(index: int, cell_id: str, kind: str, tokens: list) -> Unit:
    text = "\n".join(_comment_text(token.string) for token in tokens)
    span = (tokens[0].start[0], tokens[-1].start[0], tokens[0].start[1])
    return Unit(index, cell_id, kind, text, span)


def _comment_text(comment: str) -> str:
    text = comment[1:]
    return text[1:] if text.startswith(" ") else text


def docstring_units(index: int, cell) -> list[Unit]:
    """The docstrings of the cell's functions and classes, dedented as a reader sees them."""
    units = []
    for node in _docstrings(ast.parse(cell.source)):
        lead, body, trail, indent = _docstring_parts(cell.source, node)
        text = _dedented(body, indent)
        if is_prose(text, "docstring"):
            span = (node.lineno, node.end_lineno, node.col_offset)
            units.append(Unit(index, cell.id, "docstring", text, span))
    return units


def _docstrings(tree) -> list:
    """The string constants that are docstrings, in the order they appear."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            first = node.body[0] if node.body else None
            if (
                isinstance(first, ast.Expr)
                and isinstance(first.value, ast.Constant)
                and isinstance(first.value.value, str)
            ):
                found.append(first.value)
    return sorted(found, key=lambda node: (node.lineno, node.col_offset))


def _docstring_parts(source: str, node) -> tuple:
    """(opening: prefix, quotes and leading white space; the text; closing white space and
    quotes; the indentation of the text's later lines)."""
    literal = _source_span(source, node)
    match = re.fullmatch(r"(?s)([rRuU]?(\"\"\"|'''|\"|')\s*)(.*?)(\s*\2)", literal)
    opening, _, body, closing = match.groups()
    indent = " " * (node.col_offset)
    return opening, body, closing, indent


def _source_span(source: str, node) -> str:
    lines = source.split("\n")[node.lineno - 1 : node.end_lineno]
    encoded = [line.encode() for line in lines]
    if len(encoded) == 1:
        return encoded[0][node.col_offset : node.end_col_offset].decode()
    encoded[0] = encoded[0][node.col_offset :]
    encoded[-1] = encoded[-1][: node.end_col_offset]
    return b"\n".join(encoded).decode()


def _dedented(body: str, indent: str) -> str:
    first, *rest = body.split("\n")
    return "\n".join([first] + [line.removeprefix(indent) for line in rest])


def is_prose(text: str, kind: str) -> bool:
    """Whether the text holds an English word outside code, formulas and link targets (and, in
    code, outside the shapes in parentheses): what a reader of the Chinese edition must get in
    Chinese."""
    text = _without_code(text)
    if kind != "markdown":
        text = SHAPE.sub(" ", text)
    return WORD.search(text) is not None


def _without_code(text: str, link_text: bool = True) -> str:
    """The text with formulas, code spans and link targets taken out (and the links' text,
    such as a paper's title, where link_text is False)."""
    text = FORMULA.sub(" ", text)
    text = CODE_SPAN.sub(" ", text)
    return LINK.sub(lambda link: link.group(1) if link_text else " ", text)


# The catalogue


def catalogue_path(notebook: Path) -> Path:
    return CATALOGUES / f"{notebook.stem}.po"


def load_catalogue(path: Path) -> polib.POFile:
    if path.exists():
        return polib.pofile(str(path), wrapwidth=0)
    catalogue = polib.POFile(wrapwidth=0)
    catalogue.metadata = {
        "Project-Id-Version": "attention-step-by-step",
        "Language": "zh_CN",
        "MIME-Version": "1.0",
        "Content-Type": "text/plain; charset=UTF-8",
        "Content-Transfer-Encoding": "8bit",
    }
    return catalogue


def translation_of(catalogue: polib.POFile, unit: Unit) -> str | None:
    """The unit's Chinese, or None where the catalogue has none that is current."""
    entry = catalogue.find(unit.text, msgctxt=unit.cell_id)
    if entry is None or not entry.msgstr or entry.fuzzy or entry.obsolete:
        return None
    return entry.msgstr


# Building


def build(notebook, catalogue: polib.POFile):
    """The Chinese notebook: a copy of the English one with each unit's Chinese in its place (the
    English left where the catalogue has no current translation, which `problems` reports)."""
    notebook = copy.deepcopy(notebook)
    units = notebook_units(notebook)
    for index, cell in enumerate(notebook.cells):
        translated = {unit: translation_of(catalogue, unit) for unit in units if unit.cell == index}
        translated = {unit: text for unit, text in translated.items() if text is not None}
        if cell.cell_type == "markdown" and translated:
            cell.source = next(iter(translated.values()))
        elif cell.cell_type == "code" and translated:
            cell.source = translated_code(cell.source, translated)
    return notebook


def build_chapter(path: Path):
    """The Chinese edition of the English chapter at path, from its catalogue."""
    return build(nbformat.read(path, as_version=4), load_catalogue(catalogue_path(path)))


def translated_code(source: str, translated: dict) -> str:
    """The code with each translated comment block and docstring replaced, from the last to the
    first so that the lines above keep their numbers."""
    lines = source.split("\n")
    for unit in sorted(translated, key=lambda unit: unit.span, reverse=True):
        first, last, column = unit.span
        chinese = translated[unit]
        if unit.kind == "comment":
            lines[first - 1 : last] = [f"{' ' * column}# {line}" for line in chinese.split("\n")]
        elif unit.kind == "trailing comment":
            line = lines[first - 1]
            lines[first - 1] = f"{line[:column]}# {' '.join(chinese.split())}"
        else:
            lines = _with_docstring(lines, unit, chinese)
    return "\n".join(lines)


def _with_docstring(lines: list[str], unit: Unit, chinese: str) -> list[str]:
    source = "\n".join(lines)
    (node,) = [
        node
        for node in _docstrings(ast.parse(source))
        if (node.lineno, node.end_lineno, node.col_offset) == unit.span
    ]
    opening, _, closing, indent = _docstring_parts(source, node)
    first, *rest = chinese.split("\n")
    body = "\n".join([first] + [indent + line if line else "" for line in rest])
    start = lines[unit.span[0] - 1]
    end = lines[unit.span[1] - 1]
    prefix = start.encode()[: node.col_offset].decode()
    suffix = end.encode()[node.end_col_offset :].decode()
    replaced = f"{prefix}{opening}{body}{closing}{suffix}".split("\n")
    return lines[: unit.span[0] - 1] + replaced + lines[unit.span[1] :]


def chapters(numbers: list[str] = ()) -> list[Path]:
    """The English chapters, or those whose numbers are given ("01", "14")."""
    found = sorted(ENGLISH.glob("[0-9][0-9]_*.ipynb"))
    return [path for path in found if not numbers or path.name[:2] in numbers]


def written(notebook) -> str:
    """A notebook as nbformat writes it to disk."""
    return nbformat.writes(notebook) + "\n"


def build_all(numbers: list[str] = ()) -> None:
    CHINESE.mkdir(exist_ok=True)
    for path in chapters(numbers):
        (CHINESE / path.name).write_text(written(build_chapter(path)), encoding="utf-8")


# Updating the catalogues


def update(notebook_path: Path) -> polib.POFile:
    """The chapter's catalogue with an entry for every unit of the English notebook: a unit with
    no entry gets one, marked fuzzy and holding the Chinese of the entry it replaces (same cell
    closest English) with that English as its previous msgid; entries no unit uses
    any more are dropped."""
    notebook = nbformat.read(notebook_path, as_version=4)
    old = load_catalogue(catalogue_path(notebook_path))
    new = load_catalogue(Path("/nonexistent"))
    new.metadata = old.metadata or new.metadata
    units = notebook_units(notebook)
    current = {(unit.cell_id, unit.text) for unit in units}
    for unit in units:
        if new.find(unit.text, msgctxt=unit.cell_id) is not None:
            continue
        entry = old.find(unit.text, msgctxt=unit.cell_id)
        if entry is None:
            entry = polib.POEntry(msgctxt=unit.cell_id, msgid=unit.text, msgstr="")
            replaced = stale_entry(old, unit, current)
            if replaced is not None and replaced.msgstr:
                entry.msgstr = replaced.msgstr
                entry.previous_msgid = replaced.msgid
                entry.flags.append("fuzzy")
        entry.comment = unit.where()
        new.append(entry)
    return new


def stale_entry(catalogue: polib.POFile, unit: Unit, current: set) -> polib.POEntry | None:
    """The entry of the unit's cell, among those no unit of the notebook now matches, whose
    English is closest to the unit's and at least SAME_TEXT alike: what its translation was
    made from before the English changed. current: the (cell id, English) of every unit."""
    left = [
        entry
        for entry in catalogue
        if entry.msgctxt == unit.cell_id and (entry.msgctxt, entry.msgid) not in current
    ]
    likeness = {id(entry): _likeness(entry.msgid, unit.text) for entry in left}
    closest = max(left, key=lambda entry: likeness[id(entry)], default=None)
    return closest if closest is not None and likeness[id(closest)] >= SAME_TEXT else None


def _likeness(old: str, new: str) -> float:
    return difflib.SequenceMatcher(None, old, new, autojunk=False).ratio()


def update_all(numbers: list[str] = ()) -> None:
    CATALOGUES.mkdir(parents=True, exist_ok=True)
    for path in chapters(numbers):
        update(path).save(str(catalogue_path(path)))


# Checking


def problems(notebook, catalogue: polib.POFile) -> list[str]:
    """What keeps a chapter's Chinese edition from being complete and current: each unit with
    no current translation (with what changed in the English, where an older translation of its
    cell exists), and each translation that breaks a rule of rule_problems."""
    found = []
    units = notebook_units(notebook)
    current = {(unit.cell_id, unit.text) for unit in units}
    for unit in units:
        chinese = translation_of(catalogue, unit)
        if chinese is not None:
            found += [f"{unit.where()}: {problem}" for problem in rule_problems(unit, chinese)]
            continue
        entry = catalogue.find(unit.text, msgctxt=unit.cell_id)
        if entry is not None and entry.fuzzy:
            previous = entry.previous_msgid or ""
            found.append(f"{unit.where()}: translation marked fuzzy{_changes(previous, unit)}")
            continue
        stale = stale_entry(catalogue, unit, current)
        if stale is not None:
            found.append(
                f"{unit.where()}: the English changed since it was translated"
                f"{_changes(stale.msgid, unit)}"
            )
        else:
            found.append(f"{unit.where()}: not translated:\n{_indented(unit.text)}")
    return found


def chapter_problems(path: Path) -> list[str]:
    return problems(nbformat.read(path, as_version=4), load_catalogue(catalogue_path(path)))


def out_of_step(english, chinese) -> list[str]:
    """How a Chinese notebook differs from its English one beyond its prose: cells (their
    number, order, ids and types), outputs, metadata, and code once comments and docstrings
    are taken out (compared as syntax trees)."""
    found = []
    if [cell.id for cell in english.cells] != [cell.id for cell in chinese.cells]:
        return ["the cells differ from the English's in number, order or ids"]
    if english.metadata != chinese.metadata:
        found.append("the notebook's metadata differs from the English's")
    for index, (ours, theirs) in enumerate(zip(english.cells, chinese.cells, strict=True)):
        where = f"cell {index} (id {ours.id})"
        if ours.cell_type != theirs.cell_type:
            found.append(
                f"{where}: a {theirs.cell_type} cell where the English has {ours.cell_type}"
            )
            continue
        if ours.metadata != theirs.metadata:
            found.append(f"{where}: its metadata differs from the English's")
        if ours.cell_type == "code":
            if ours.outputs != theirs.outputs or ours.execution_count != theirs.execution_count:
                found.append(f"{where}: its outputs differ from the English's")
            if _code_tree(ours.source) != _code_tree(theirs.source):
                found.append(f"{where}: its code differs from the English's")
    return found


def _code_tree(source: str) -> str:
    """The code's syntax tree with every docstring emptied: what a comment or a docstring's
    translation cannot change."""
    tree = ast.parse(source)
    for node in _docstrings(tree):
        node.value = ""
    return ast.dump(tree)


def _changes(previous: str, unit: Unit) -> str:
    if not previous:
        return ""
    diff = difflib.unified_diff(
        previous.split("\n"), unit.text.split("\n"), "translated", "now", lineterm="", n=1
    )
    return ":\n" + _indented("\n".join(diff))


def _indented(text: str) -> str:
    return "\n".join(f"    {line}" for line in text.split("\n"))


def rule_problems(unit: Unit, chinese: str) -> list[str]:
    """What a translation must keep of its English: every formula, code span, link target and
    number; markdown headings at the same levels; a comment after code on one line; and no
    sentence left in English."""
    found = []
    for name, pattern in (("formula", FORMULA), ("code span", CODE_SPAN)):
        for kept in sorted(_spans(pattern, unit.text) - _spans(pattern, chinese)):
            found.append(f"the {name} {kept!r} is missing")
    english_links = {target for _, target in LINK.findall(unit.text)}
    for target in sorted(english_links - {target for _, target in LINK.findall(chinese)}):
        found.append(f"the link to {target} is missing")
    chinese_numbers = set(NUMBER.findall(chinese))
    for number in sorted(set(NUMBER.findall(_without_code(unit.text))) - chinese_numbers):
        if not chinese_numbers & _in_chinese_units(number, unit.text):
            found.append(f"the number {number} is missing")
    if unit.kind == "markdown" and HEADING.findall(unit.text) != HEADING.findall(chinese):
        found.append("the headings differ from the English's in number or level")
    if unit.kind == "markdown" and _unread_bold(chinese) and not _unread_bold(unit.text):
        found.append(
            "a ** that markdown does not read as bold (after punctuation, a closing ** needs a "
            "space or punctuation after it; before punctuation, an opening ** needs one before it)"
        )
    if unit.kind == "trailing comment" and "\n" in chinese.strip():
        found.append("a comment after code must stay on one line")
    if not CJK.search(chinese) and (unit.kind == "markdown" or PROSE_RUN.search(unit.text)):
        found.append("no Chinese in the translation")
    for left in UNTRANSLATED.findall(_without_code(chinese, link_text=False)):
        found.append(f"English left untranslated: {left!r}")
    return found


def _in_chinese_units(number: str, english: str) -> set[str]:
    """The number as Chinese counts it where the English says "N million" or "N billion":
    "4.2 million" is 420 万, "1.5 billion" is 15 亿."""
    scales = {"million": 100, "billion": 10}
    found = set()
    for scale, times in scales.items():
        if re.search(rf"(?<![\w.]){re.escape(number)} {scale}\b", english):
            found.add(f"{float(number.replace(',', '')) * times:g}")
    return found


def _unread_bold(text: str) -> bool:
    """Whether a ** is left as it is when the text is rendered as markdown (CommonMark reads
    "**粗体：**后文" as text: a ** after punctuation closes only before a space or punctuation)."""
    html = re.sub(r"<code>.*?</code>", "", mistune.html(FORMULA.sub("x", text)), flags=re.DOTALL)
    return "**" in html


def _spans(pattern: re.Pattern, text: str) -> set[str]:
    """The formulas or code spans in the text, each with its white space as one space (a span
    the English breaks over two lines may be one line in Chinese)."""
    return {" ".join(span.split()) for span in pattern.findall(text)}


def check_all(numbers: list[str] = ()) -> int:
    count = 0
    for path in chapters(numbers):
        for problem in chapter_problems(path):
            print(f"{path.name}: {problem}")
            count += 1
    return count


if __name__ == "__main__":
    command, *numbers = sys.argv[1:] or [""]
    if command == "build":
        build_all(numbers)
    elif command == "update":
        update_all(numbers)
    elif command == "check":
        sys.exit(1 if check_all(numbers) else 0)
    else:
        sys.exit(__doc__)
