"""What a person would see wrong on a page, as JavaScript for Playwright's ``page.evaluate(CHECK,
root)``, shared by the app's tests (test_tabs.py) and the report's (test_report.py): text cut off or
a box scrolling sideways, text drawn over other text, and a page wider than its window. Each check
returns a list of problems, one line each, naming the element by its tag, classes and text."""

from __future__ import annotations

__all__ = ["LAYOUT_PROBLEMS", "TEXT_OVERLAPS", "PAGE_OVERFLOW"]

# What the page shows that is cut off or scrolls sideways: an element whose content is wider than
# its box, where the box hides the rest (a cut label) or scrolls (a stray scrollbar). Boxes meant
# to scroll (logs, files: .workbench-scroll, text areas) and form fields holding long text are not.
LAYOUT_PROBLEMS = """root => {
    const problems = [];
    const name = el => {
        const text = (el.innerText || el.value || el.getAttribute('placeholder') || '').trim().slice(0, 60);
        return `${el.tagName.toLowerCase()}.${[...el.classList].slice(0, 3).join('.')} "${text}"`;
    };
    for (const el of [root, ...root.querySelectorAll('*')]) {
        if (el.offsetParent === null || el.clientWidth === 0) continue;
        if (['INPUT', 'TEXTAREA', 'SELECT', 'OPTION', 'IMG'].includes(el.tagName)) continue;
        if (el.closest('.workbench-scroll, textarea')) continue;
        const style = getComputedStyle(el);
        if (el.scrollWidth <= el.clientWidth + 1) continue;
        if (['hidden', 'clip'].includes(style.overflowX) || style.textOverflow === 'ellipsis')
            problems.push(`cut off: ${name(el)} (${el.scrollWidth}px of content in ${el.clientWidth}px)`);
        else if (['auto', 'scroll'].includes(style.overflowX)) {
            const edge = el.getBoundingClientRect().right + 1;
            const out = [...el.querySelectorAll('*')].filter(d => d.offsetParent !== null
                && d.getBoundingClientRect().right > edge).slice(-1).map(name);
            problems.push(`scrolls sideways: ${name(el)} (${el.scrollWidth}px in ${el.clientWidth}px), `
                          + `sticking out: ${out.join(', ')}`);
        }
    }
    // a hint in an empty field cut short ("the model's po"): its text is wider than the field's box
    const canvas = document.createElement('canvas').getContext('2d');
    for (const input of root.querySelectorAll('input[placeholder]')) {
        if (input.offsetParent === null || input.value || !input.placeholder) continue;
        const style = getComputedStyle(input);
        canvas.font = style.font;
        const needed = canvas.measureText(input.placeholder).width + parseFloat(style.paddingLeft)
            + parseFloat(style.paddingRight);
        if (needed > input.clientWidth + 1)
            problems.push(`hint cut off: ${name(input)} (${Math.round(needed)}px of hint in ${input.clientWidth}px)`);
    }
    for (const img of root.querySelectorAll('img')) {
        if (img.offsetParent !== null && (!img.complete || img.naturalWidth === 0))
            problems.push(`broken image: ${name(img)}`);
    }
    return problems;
}"""


# Text drawn over other text: each visible text node's line boxes (clipped by a parent that hides its
# overflow, as a table cell cut with an ellipsis), against every other node's on the same lines.
# Plots are SVG and checked by measure/store/plot_check.py; form fields are not text here.
TEXT_OVERLAPS = """root => {
    const boxes = [];
    const walker = document.createTreeWalker(root, NodeFilter.SHOW_TEXT);
    while (walker.nextNode()) {
        const node = walker.currentNode, el = node.parentElement;
        if (!node.textContent.trim() || !el || el.offsetParent === null) continue;
        if (el.closest('svg, textarea, select, option, script, style')) continue;
        let clip = null;
        for (let up = el; up && up !== document.body; up = up.parentElement) {
            if (getComputedStyle(up).overflowX !== 'visible') { clip = up.getBoundingClientRect(); break; }
        }
        const range = document.createRange();
        range.selectNodeContents(node);
        for (const r of range.getClientRects()) {
            const box = {left: r.left, right: r.right, top: r.top, bottom: r.bottom};
            if (clip) {
                box.left = Math.max(box.left, clip.left); box.right = Math.min(box.right, clip.right);
                box.top = Math.max(box.top, clip.top); box.bottom = Math.min(box.bottom, clip.bottom);
            }
            if (box.right - box.left > 1 && box.bottom - box.top > 1)
                boxes.push({box, node, text: node.textContent.trim().slice(0, 40)});
        }
    }
    boxes.sort((a, b) => a.box.top - b.box.top);
    const problems = [];
    for (let i = 0; i < boxes.length; i++) {
        const a = boxes[i].box;
        for (let j = i + 1; j < boxes.length && boxes[j].box.top < a.bottom; j++) {
            const b = boxes[j].box;
            if (boxes[i].node === boxes[j].node) continue;
            const wide = Math.min(a.right, b.right) - Math.max(a.left, b.left);
            const high = Math.min(a.bottom, b.bottom) - Math.max(a.top, b.top);
            if (wide > 2 && high > 4)
                problems.push(`text over text: "${boxes[i].text}" and "${boxes[j].text}" (${Math.round(wide)}x${Math.round(high)}px)`);
        }
    }
    return problems.slice(0, 20);
}"""

# The page itself wider than its window: a sideways scrollbar on the whole page.
PAGE_OVERFLOW = """() => {
    const page = document.documentElement;
    return page.scrollWidth > page.clientWidth + 1
        ? [`the page is ${page.scrollWidth}px wide in a ${page.clientWidth}px window`] : [];
}"""
