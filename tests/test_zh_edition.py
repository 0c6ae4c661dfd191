"""The Chinese edition (notebooks/zh/) kept in step with the English one: every chapter has one,
it is what tools/zh_edition.py builds from the English notebook and its catalogue, every piece
of English prose has a current translation that keeps the English's formulas, code, links and
numbers, and cell for cell the code and outputs are the English's. The second half shows that
each check fails where it should: a changed English cell, number, formula or line of code, and a
missing translation."""

import copy
import json
import subprocess
from pathlib import Path

import nbformat
import polib
import pytest
import zh_edition
from zh_edition import (
    CHINESE,
    build,
    build_chapter,
    catalogue_path,
    chapters,
    notebook_units,
    out_of_step,
    problems,
    written,
)

ROOT = Path(__file__).resolve().parents[1]
CHAPTERS = chapters()


def test_there_are_fourteen_chapters_or_more():
    assert len(CHAPTERS) >= 14


@pytest.mark.parametrize("english", CHAPTERS, ids=lambda path: path.name[:2])
def test_every_chapter_has_a_chinese_edition_and_a_catalogue(english):
    assert (CHINESE / english.name).exists(), f"no notebooks/zh/{english.name}: run make zh"
    assert catalogue_path(english).exists(), f"no {catalogue_path(english)}: run make zh-update"


@pytest.mark.parametrize("english", CHAPTERS, ids=lambda path: path.name[:2])
def test_the_chinese_notebook_is_what_the_build_makes(english):
    committed = (CHINESE / english.name).read_text(encoding="utf-8")
    assert committed == written(build_chapter(english)), (
        f"notebooks/zh/{english.name} is not what make zh builds from {english.name} and its "
        "translations: run make zh"
    )


@pytest.mark.parametrize("english", CHAPTERS, ids=lambda path: path.name[:2])
def test_every_piece_of_english_prose_has_a_current_translation(english):
    found = zh_edition.chapter_problems(english)
    assert not found, f"{english.name}, {len(found)} to do:\n" + "\n".join(found)


@pytest.mark.parametrize("english", CHAPTERS, ids=lambda path: path.name[:2])
def test_cell_for_cell_the_code_and_outputs_are_the_englishs(english):
    chinese = nbformat.read(CHINESE / english.name, as_version=4)
    assert out_of_step(nbformat.read(english, as_version=4), chinese) == []


# Each check fails where it should, on a small notebook and catalogue of its own

CODE = '''def pooled(queries, keys, values):
    """Attention pooling: each query's weighted average of the values."""
    # one weight per query and key
    weights = (-(queries[:, None] - keys) ** 2 / 2).softmax(-1)  # rows sum to one
    return weights @ values
'''
PROSE = "## Pooling\n\nEach of the 3 queries gets weights $\\alpha$ that sum to `1`, see [this](https://d2l.ai)."
CHINESE_PROSE = (
    "## 汇聚\n\n3 个查询各得到一组权重 $\\alpha$，其和为 `1`，见[这里](https://d2l.ai)。"
)
TRANSLATIONS = {
    PROSE: CHINESE_PROSE,
    "Attention pooling: each query's weighted average of the values.": (
        "注意力汇聚：每个查询对值的加权平均。"
    ),
    "one weight per query and key": "每个查询和每个键各一个权重",
    "rows sum to one": "每行之和为一",
}


def _small():
    notebook = nbformat.v4.new_notebook()
    notebook.cells = [
        nbformat.v4.new_markdown_cell(PROSE, id="prose"),
        nbformat.v4.new_code_cell(CODE, id="code"),
    ]
    notebook.cells[1].outputs = [nbformat.v4.new_output("stream", text="done\n")]
    catalogue = zh_edition.load_catalogue(zh_edition.CATALOGUES / "no such file.po")
    for unit in notebook_units(notebook):
        catalogue.append(
            polib.POEntry(msgctxt=unit.cell_id, msgid=unit.text, msgstr=TRANSLATIONS[unit.text])
        )
    return notebook, catalogue


def test_the_small_notebook_is_translated_in_place_and_in_step():
    notebook, catalogue = _small()
    chinese = build(notebook, catalogue)
    assert problems(notebook, catalogue) == []
    assert out_of_step(notebook, chinese) == []
    assert chinese.cells[0].source == CHINESE_PROSE
    assert '"""注意力汇聚：每个查询对值的加权平均。"""' in chinese.cells[1].source
    assert "    # 每个查询和每个键各一个权重\n" in chinese.cells[1].source
    assert chinese.cells[1].source.split("\n")[3].endswith(".softmax(-1)  # 每行之和为一")
    assert chinese.cells[1].outputs == notebook.cells[1].outputs


def test_a_changed_english_cell_names_the_cell_and_shows_what_changed():
    notebook, catalogue = _small()
    notebook.cells[0].source = PROSE.replace("sum to", "add up to")
    (found,) = problems(notebook, catalogue)
    assert found.startswith("cell 0 (id prose), markdown: the English changed")
    assert "-Each of the 3 queries gets weights $\\alpha$ that sum to" in found
    assert "+Each of the 3 queries gets weights $\\alpha$ that add up to" in found


def test_a_changed_english_comment_or_docstring_is_named_too():
    notebook, catalogue = _small()
    notebook.cells[1].source = CODE.replace("rows sum to one", "each row sums to one")
    (found,) = problems(notebook, catalogue)
    assert found.startswith("cell 1 (id code), trailing comment: the English changed")
    assert "+each row sums to one" in found


@pytest.mark.parametrize(
    "english, chinese, problem",
    [
        ("3 queries", "三个查询", "the number 3 is missing"),
        ("$\\alpha$", "$\\beta$", "the formula '$\\\\alpha$' is missing"),
        ("`1`", "1", "the code span '`1`' is missing"),
        ("(https://d2l.ai)", "(https://zh.d2l.ai)", "the link to https://d2l.ai is missing"),
        ("## 汇聚", "### 汇聚", "the headings differ"),
    ],
)
def test_a_translation_that_drops_a_number_formula_code_or_link_is_refused(
    english, chinese, problem
):
    notebook, catalogue = _small()
    entry = catalogue.find(PROSE, msgctxt="prose")
    entry.msgstr = entry.msgstr.replace(english if english in entry.msgstr else "", chinese)
    if english == "3 queries":
        entry.msgstr = CHINESE_PROSE.replace("3 个查询", chinese)
    (found,) = problems(notebook, catalogue)
    assert found.startswith("cell 0 (id prose), markdown: " + problem)


def test_a_changed_number_or_formula_in_the_english_makes_its_translation_stale():
    for old, new in (("3 queries", "4 queries"), ("$\\alpha$", "$\\alpha_i$")):
        notebook, catalogue = _small()
        notebook.cells[0].source = PROSE.replace(old, new)
        (found,) = problems(notebook, catalogue)
        assert "the English changed since it was translated" in found


def test_english_left_in_a_translation_is_refused():
    notebook, catalogue = _small()
    catalogue.find(PROSE, msgctxt="prose").msgstr = PROSE
    found = problems(notebook, catalogue)
    assert "cell 0 (id prose), markdown: no Chinese in the translation" in found
    assert any(
        f.startswith("cell 0 (id prose), markdown: English left untranslated") for f in found
    )


def test_a_missing_or_fuzzy_translation_is_named():
    notebook, catalogue = _small()
    catalogue.remove(catalogue.find("rows sum to one", msgctxt="code"))
    catalogue.find(PROSE, msgctxt="prose").flags.append("fuzzy")
    found = problems(notebook, catalogue)
    assert found == [
        "cell 0 (id prose), markdown: translation marked fuzzy",
        "cell 1 (id code), trailing comment: not translated:\n    rows sum to one",
    ]


def test_a_changed_line_of_code_puts_the_chinese_notebook_out_of_step():
    notebook, catalogue = _small()
    chinese = build(notebook, catalogue)
    changed = copy.deepcopy(notebook)
    changed.cells[1].source = CODE.replace("/ 2", "/ 3")
    assert problems(changed, catalogue) == []  # the prose is all still translated
    assert out_of_step(changed, chinese) == [
        "cell 1 (id code): its code differs from the English's"
    ]
    assert written(build(changed, catalogue)) != written(chinese)  # and make zh would rewrite it


def test_changed_outputs_cells_or_ids_put_it_out_of_step():
    notebook, catalogue = _small()
    chinese = build(notebook, catalogue)
    outputs = copy.deepcopy(notebook)
    outputs.cells[1].outputs[0].text = "done twice\n"
    assert out_of_step(outputs, chinese) == [
        "cell 1 (id code): its outputs differ from the English's"
    ]
    one_more = copy.deepcopy(notebook)
    one_more.cells.append(nbformat.v4.new_markdown_cell("More.", id="more"))
    assert out_of_step(one_more, chinese) == [
        "the cells differ from the English's in number, order or ids"
    ]


def test_update_keeps_the_old_chinese_of_a_changed_cell_as_a_fuzzy_start(tmp_path, monkeypatch):
    notebook, catalogue = _small()
    monkeypatch.setattr(zh_edition, "CATALOGUES", tmp_path)
    english = tmp_path / "99_small.ipynb"
    nbformat.write(notebook, english)
    catalogue.save(str(tmp_path / "99_small.po"))
    notebook.cells[0].source = PROSE.replace("sum to", "add up to")
    nbformat.write(notebook, english)
    updated = zh_edition.update(english)
    entry = updated.find(notebook.cells[0].source, msgctxt="prose")
    assert entry.fuzzy and entry.msgstr == CHINESE_PROSE and entry.previous_msgid == PROSE
    assert updated.find(PROSE, msgctxt="prose") is None  # the old English is gone
    assert "translation marked fuzzy" in problems(notebook, updated)[0]


# make lab-zh starts JupyterLab as the browser test does (tests/lab_browser.py), in Chinese;
# make lab keeps English whatever the machine's locale


def _recipe(target: str) -> str:
    return subprocess.run(
        ["make", "-n", "-o", "setup", target], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout


def test_make_lab_zh_opens_the_chinese_chapter_01_with_the_chinese_settings():
    from lab_browser import CHINESE_FIRST_CHAPTER, CHINESE_SETTINGS

    recipe = _recipe("lab-zh")
    in_venv = CHINESE_SETTINGS.relative_to(ROOT / "jupyter-env")
    assert f"JUPYTERLAB_SETTINGS_DIR={ROOT}/.venv/{in_venv}" in recipe
    assert f"--LabApp.default_url=/lab/tree/{CHINESE_FIRST_CHAPTER}" in recipe
    assert (ROOT / "notebooks" / CHINESE_FIRST_CHAPTER).exists()
    plugin = CHINESE_SETTINGS / "@jupyterlab/translation-extension/plugin.jupyterlab-settings"
    assert json.loads(plugin.read_text()) == {"locale": "zh_CN"}


def test_make_lab_keeps_the_english_locale():
    assert "JUPYTERLAB_SETTINGS_DIR" not in _recipe("lab")
    overrides = ROOT / "jupyter-env/share/jupyter/lab/settings/overrides.d"
    settings = json.loads((overrides / "attention_step_by_step.json").read_text())
    assert settings["@jupyterlab/translation-extension:plugin"] == {"locale": "en"}


def test_millions_may_be_counted_in_wan():
    notebook, catalogue = _small()
    notebook.cells[0].source = PROSE + " It has 4.2 million parameters."
    entry = catalogue.find(PROSE, msgctxt="prose")
    entry.msgid = notebook.cells[0].source
    entry.msgstr = CHINESE_PROSE + "它有 420 万个参数。"
    assert problems(notebook, catalogue) == []
    entry.msgstr = CHINESE_PROSE + "它有 42 万个参数。"
    assert problems(notebook, catalogue) == [
        "cell 0 (id prose), markdown: the number 4.2 is missing"
    ]


def test_bold_that_markdown_would_show_as_asterisks_is_refused():
    notebook, catalogue = _small()
    notebook.cells[0].source = PROSE + " **Step 1:** reshape."
    entry = catalogue.find(PROSE, msgctxt="prose")
    entry.msgid = notebook.cells[0].source
    entry.msgstr = CHINESE_PROSE + "**第 1 步：**改变形状。"
    (found,) = problems(notebook, catalogue)
    assert found.startswith("cell 0 (id prose), markdown: a ** that markdown does not read as bold")
    entry.msgstr = CHINESE_PROSE + "**第 1 步：** 改变形状。"
    assert problems(notebook, catalogue) == []
