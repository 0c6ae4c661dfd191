"""The Chinese edition in a real browser: JupyterLab started as `make lab-zh` starts it opens on
the Chinese chapter 01 with its own menus in Chinese, and the chapter's Chinese text is drawn as
Chinese, not as boxes (a font with Chinese glyphs must be there: Debian's fonts-noto-cjk, which
.ci/run installs). `make lab`, started on a machine whose LANG is Chinese, keeps its menus in
English. A screenshot lands in artifacts/browser/zh_01_attention_pooling.png.
Run alone with `make test-browser`.
"""

import os
import re
import shutil
from pathlib import Path

import pytest
from lab_browser import (
    CHINESE_FIRST_CHAPTER,
    CHINESE_SETTINGS,
    jupyterlab,
    open_first_view,
    skip_without_a_browser,
)

ROOT = Path(__file__).resolve().parents[1]
SCREENSHOTS = ROOT / "artifacts" / "browser"
GET_A_FONT = "a font with Chinese glyphs (Debian and Ubuntu: sudo apt install fonts-noto-cjk)"

skip_without_a_browser()


def _served(tmp_path_factory) -> Path:
    """The English and the Chinese chapter 01, laid out as in notebooks/."""
    root = tmp_path_factory.mktemp("notebooks")
    (root / "zh").mkdir()
    shutil.copy(ROOT / "notebooks" / Path(CHINESE_FIRST_CHAPTER).name, root)
    shutil.copy(ROOT / "notebooks" / CHINESE_FIRST_CHAPTER, root / "zh")
    return root


@pytest.fixture(scope="module")
def chinese_lab(tmp_path_factory):
    """JupyterLab as `make lab-zh` starts it."""
    root, scratch = _served(tmp_path_factory), tmp_path_factory.mktemp("zh_jupyter")
    default_url = f"--LabApp.default_url=/lab/tree/{CHINESE_FIRST_CHAPTER}"
    with jupyterlab(root, scratch, settings=CHINESE_SETTINGS, lab_args=[default_url]) as lab:
        yield lab


@pytest.fixture(scope="module")
def english_lab_on_a_chinese_machine(tmp_path_factory):
    """JupyterLab as `make lab` starts it, where the machine's locale is Chinese."""
    root, scratch = _served(tmp_path_factory), tmp_path_factory.mktemp("en_jupyter")
    chinese = {"LANG": "zh_CN.UTF-8", "LC_ALL": "zh_CN.UTF-8", "LANGUAGE": "zh_CN"}
    with jupyterlab(root, scratch, env_changes=chinese) as lab:
        yield lab


def _menu_titles(page) -> list[str]:
    titles = page.locator("#jp-menu-panel .lm-MenuBar-itemLabel")
    titles.first.wait_for()
    return [title.strip() for title in titles.all_inner_texts()]


# Two characters of one Unicode block, drawn with the font the page uses for the chapter's
# text: with Chinese glyphs they differ; without, both are the same missing-glyph box.
GLYPHS_DIFFER_JS = """
(element, [first, second]) => {
    const font = getComputedStyle(element).font;
    const drawn = (text) => {
        const canvas = document.createElement('canvas');
        canvas.width = 64; canvas.height = 64;
        const context = canvas.getContext('2d');
        context.font = font.replace(/\\d+(\\.\\d+)?px/, '40px');
        context.fillText(text, 4, 48);
        return Array.from(context.getImageData(0, 0, 64, 64).data).join(',');
    };
    const inked = (pixels) => pixels.split(',').some((value, i) => i % 4 === 3 && value > 0);
    return {
        differ: drawn(first) !== drawn(second),
        inked: inked(drawn(first)),
        boxesAlike: drawn('\ue000') === drawn('\ue001'),  // two glyphs no font has
        font,
    };
}
"""


def test_make_lab_zh_opens_the_chinese_chapter_01_with_chinese_menus(chinese_lab, page):
    assert open_first_view(page, *chinese_lab) == Path(CHINESE_FIRST_CHAPTER).name
    assert "/lab/tree/zh/" in page.url
    titles = _menu_titles(page)
    assert titles[:2] == ["文件", "编辑"], titles
    heading = page.locator(".jp-RenderedMarkdown h1").first
    heading.wait_for()
    text = heading.inner_text()
    characters = re.findall(r"[\u4e00-\u9fff]", text)
    assert len(characters) >= 2, f"the chapter's title has no Chinese: {text!r}"
    glyphs = heading.evaluate(GLYPHS_DIFFER_JS, characters[:2])
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=SCREENSHOTS / "zh_01_attention_pooling.png")
    if not glyphs["differ"]:
        message = f"Chinese text is drawn as boxes in {glyphs['font']!r}: install {GET_A_FONT}"
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            raise AssertionError(message)
        pytest.skip(message)
    assert glyphs["inked"]
    assert glyphs["boxesAlike"]  # the comparison would catch boxes: two missing glyphs match


def test_make_lab_keeps_english_menus_on_a_chinese_machine(english_lab_on_a_chinese_machine, page):
    open_first_view(page, *english_lab_on_a_chinese_machine)
    assert _menu_titles(page)[:2] == ["File", "Edit"]
