// A model's Markdown as DOM nodes: fenced code blocks (with a Copy button), headings,
// lists, paragraphs, `code`, **bold** and *emphasis*. Text a model writes is data: every
// character of it ends up in a Text node (createTextNode / textContent), never parsed as
// HTML, and links stay text, so `<script>` or `<img onerror>` in an answer is shown, not run.
// An unclosed fence (an answer still streaming) renders as code up to the end.

const FENCE = /^\s*(`{3,}|~{3,})\s*([\w+#.-]*)/;
const HEADING = /^(#{1,6})\s+(.*)$/;
const ITEM = /^\s*([-*+]|\d{1,9}[.)])\s+(.*)$/;
// `code`, **strong**, __strong__, *em*, _em_ (not inside words, not around spaces)
const INLINE = /(`+)([\s\S]*?[^`])\1(?!`)|\*\*(?=\S)([\s\S]*?\S)\*\*|__(?=\S)([\s\S]*?\S)__|\*(?=[^\s*])([\s\S]*?[^\s*])\*|(?<![\w])_(?=[^\s_])([\s\S]*?[^\s_])_(?![\w])/g;

/** `text`'s inline marks as nodes appended to `parent`. */
function inline(parent, text) {
  let at = 0;
  for (const m of text.matchAll(INLINE)) {
    if (m.index > at) parent.append(document.createTextNode(text.slice(at, m.index)));
    let node;
    if (m[1] !== undefined) {
      node = document.createElement('code');
      node.textContent = m[2];
    } else if (m[3] !== undefined || m[4] !== undefined) {
      node = document.createElement('strong');
      inline(node, m[3] ?? m[4]);
    } else {
      node = document.createElement('em');
      inline(node, m[5] ?? m[6]);
    }
    parent.append(node);
    at = m.index + m[0].length;
  }
  if (at < text.length) parent.append(document.createTextNode(text.slice(at)));
}

/** A code block with its language (if named) and a button that copies the code. */
function codeBlock(lang, code) {
  const box = document.createElement('div');
  box.className = 'code';
  const bar = document.createElement('div');
  bar.className = 'code-bar';
  const name = document.createElement('span');
  name.textContent = lang || 'code';
  const copy = document.createElement('button');
  copy.type = 'button';
  copy.className = 'copy';
  copy.textContent = 'Copy';
  copy.setAttribute('aria-label', `Copy ${lang || 'code'}`);
  copy.addEventListener('click', async () => {
    try {
      await navigator.clipboard.writeText(code);
      copy.textContent = 'Copied';
    } catch {
      copy.textContent = 'Copy failed';
    }
    setTimeout(() => { copy.textContent = 'Copy'; }, 1500);
  });
  bar.append(name, copy);
  const pre = document.createElement('pre');
  pre.tabIndex = 0; // a wide block scrolls by keyboard too
  const el = document.createElement('code');
  el.textContent = code;
  pre.append(el);
  box.append(bar, pre);
  return box;
}

/** `text` (Markdown) as a fragment of DOM nodes. */
export function renderMarkdown(text) {
  const out = document.createDocumentFragment();
  const lines = text.split('\n');
  let para = null;
  let list = null;
  const endBlocks = () => { para = null; list = null; };
  for (let i = 0; i < lines.length; i++) {
    const line = lines[i];
    const fence = line.match(FENCE);
    if (fence) {
      endBlocks();
      const close = new RegExp(`^\\s*${fence[1][0] === '`' ? '`' : '~'}{${fence[1].length},}\\s*$`);
      const code = [];
      for (i += 1; i < lines.length && !close.test(lines[i]); i++) code.push(lines[i]);
      out.append(codeBlock(fence[2], code.join('\n')));
      continue;
    }
    if (line.trim() === '') {
      endBlocks();
      continue;
    }
    const heading = line.match(HEADING);
    if (heading) {
      endBlocks();
      // the page's own headings are h1 and h2
      const h = document.createElement(`h${Math.min(6, heading[1].length + 2)}`);
      inline(h, heading[2]);
      out.append(h);
      continue;
    }
    const item = line.match(ITEM);
    if (item) {
      para = null;
      const ordered = /\d/.test(item[1]);
      if (!list || (list.tagName === 'OL') !== ordered) {
        list = document.createElement(ordered ? 'ol' : 'ul');
        if (ordered && item[1] !== '1.' && item[1] !== '1)') list.start = parseInt(item[1], 10);
        out.append(list);
      }
      const li = document.createElement('li');
      inline(li, item[2]);
      list.append(li);
      continue;
    }
    if (list && /^\s+\S/.test(line)) {
      // a list item's continuation line
      list.lastChild.append(document.createElement('br'));
      inline(list.lastChild, line.trim());
      continue;
    }
    list = null;
    if (para) para.append(document.createElement('br'));
    else {
      para = document.createElement('p');
      out.append(para);
    }
    inline(para, line);
  }
  return out;
}
