// A pad the learner draws digits on (mouse, or arrow keys and Space), and what the kernel
// computed for the drawing: the reader's attention over the 6 x 6 patches for the token the
// learner picks, the 24 x 24 canvas the models see, and the readout. Joined after protocol.js.
// Only drawing lives here: every number drawn comes from the kernel's `view`.

const PAD_PX = 4; // screen pixels per drawing-grid cell: the 96 x 96 grid on 384 x 384
const SEEN_PX = 5; // screen pixels per canvas pixel in the small "what the models see" image
const PEN_WIDTH = 5; // drawing-grid cells: the kernel's pen (helpers.vision.PEN_RADIUS x 2)
const KEY_STEP = 2; // drawing-grid cells per arrow key press (Shift: 4 times as far)
const PAD_STYLE = `
.attention-direct-pad .pad-side { display: flex; flex-direction: column; gap: 6px; }
.attention-direct-pad .pad-caption { font-size: 11px; color: var(--jp-ui-font-color2, #555); max-width: 260px; }
.attention-direct-pad .pad-tokens { display: flex; flex-wrap: wrap; gap: 4px; max-width: 260px; }
.attention-direct-pad button { font: inherit; padding: 2px 8px; cursor: pointer;
  border: 1px solid var(--jp-border-color1, #999); border-radius: 3px;
  background: var(--jp-layout-color1, #fff); color: var(--jp-ui-font-color1, #222); }
.attention-direct-pad button.chosen { background: #d62728; border-color: #d62728; color: white; }
.attention-direct-pad canvas:focus { outline: 2px solid var(--jp-brand-color1, #1976d2); }
.attention-direct-pad canvas.pad-seen { cursor: default; }
.attention-direct-pad .pad-clear { align-self: flex-start; }
`;

function addPadStyle() {
  if (document.getElementById("attention-direct-pad-style")) return;
  element("style", { id: "attention-direct-pad-style" }, document.head).textContent = PAD_STYLE;
}

function drawPad(context, view, strokes, chosen, cursor) {
  const size = view.pad.size;
  const side = size * PAD_PX;
  context.clearRect(0, 0, side, side);
  context.fillStyle = "white";
  context.fillRect(0, 0, side, side);
  const token = view.tokens[chosen];
  if (token) {
    // the token's attention on each patch as a translucent red square, the largest the deepest
    const patches = view.pad.patches;
    const patchPx = side / patches;
    const largest = Math.max(...token.attention, 1e-9);
    token.attention.forEach((weight, index) => {
      const [row, col] = [Math.floor(index / patches), index % patches];
      context.fillStyle = `rgba(214, 39, 40, ${(0.6 * weight) / largest})`;
      context.fillRect(col * patchPx, row * patchPx, patchPx, patchPx);
    });
  }
  const cellPx = side / view.pad.cells;
  context.strokeStyle = "rgba(0, 0, 0, 0.15)";
  context.lineWidth = 1;
  for (let edge = 1; edge < view.pad.cells; edge++) {
    context.beginPath();
    context.moveTo(edge * cellPx + 0.5, 0);
    context.lineTo(edge * cellPx + 0.5, side);
    context.moveTo(0, edge * cellPx + 0.5);
    context.lineTo(side, edge * cellPx + 0.5);
    context.stroke();
  }
  context.strokeStyle = "black";
  context.fillStyle = "black";
  context.lineWidth = PEN_WIDTH * PAD_PX;
  context.lineCap = "round";
  context.lineJoin = "round";
  for (const stroke of strokes) {
    if (stroke.length === 0) continue;
    context.beginPath();
    context.moveTo(stroke[0][0] * PAD_PX, stroke[0][1] * PAD_PX);
    for (const [x, y] of stroke.slice(1)) context.lineTo(x * PAD_PX, y * PAD_PX);
    if (stroke.length === 1) context.lineTo(stroke[0][0] * PAD_PX + 0.01, stroke[0][1] * PAD_PX);
    context.stroke();
  }
  if (token) {
    // the share of the attention on each cell, as the kernel summed it
    context.font = "12px sans-serif";
    context.textAlign = "right";
    context.textBaseline = "bottom";
    token.cell_shares.forEach((share, cell) => {
      const [row, col] = [Math.floor(cell / view.pad.cells), cell % view.pad.cells];
      context.fillStyle = cell === token.most_attended_cell ? "#d62728" : "rgba(0, 0, 0, 0.45)";
      context.fillText(`${(100 * share).toFixed(0)}%`, (col + 1) * cellPx - 4, (row + 1) * cellPx - 3);
    });
  }
  // the ViT's guess for each cell with ink, small, in its top-left corner (where a digit drawn
  // in the middle of its cell leaves room), on a light backing
  context.font = "10px sans-serif";
  context.textAlign = "left";
  context.textBaseline = "bottom";
  for (const guess of view.guesses) {
    const [row, col] = [Math.floor(guess.cell / view.pad.cells), guess.cell % view.pad.cells];
    const text = `ViT: ${guess.guess} (p ${guess.probability.toFixed(2)})`;
    const [x, y] = [col * cellPx + 3, row * cellPx + 14];
    context.fillStyle = "rgba(255, 255, 255, 0.7)";
    context.fillRect(x - 2, y - 12, context.measureText(text).width + 4, 13);
    context.fillStyle = "#1f77b4";
    context.fillText(text, x, y);
  }
  if (cursor.shown) {
    context.beginPath();
    context.arc(cursor.x * PAD_PX, cursor.y * PAD_PX, (PEN_WIDTH / 2) * PAD_PX, 0, 2 * Math.PI);
    context.lineWidth = 2;
    context.strokeStyle = "#1976d2";
    context.fillStyle = "rgba(25, 118, 210, 0.35)";
    if (cursor.down) context.fill();
    context.stroke();
  }
}

function drawSeen(canvas, counts) {
  const side = counts.length;
  canvas.width = side;
  canvas.height = side;
  const context = canvas.getContext("2d");
  const pixels = context.createImageData(side, side);
  counts.forEach((row, r) =>
    row.forEach((count, c) => {
      const grey = Math.round(255 * (1 - count / 16));
      pixels.data.set([grey, grey, grey, 255], 4 * (r * side + c));
    }),
  );
  context.putImageData(pixels, 0, 0);
  canvas.setAttribute("data-counts", JSON.stringify(counts));
}

function drawTokens(box, view, chosen, choose) {
  box.replaceChildren();
  view.tokens.forEach((token, index) => {
    const button = element("button", { type: "button", "aria-pressed": String(index === chosen), "data-index": index }, box);
    button.textContent = `${index + 1}: ${token.label}`;
    if (index === chosen) button.classList.add("chosen");
    button.addEventListener("click", () => choose(index));
  });
}

function render({ model, el }) {
  addPadStyle();
  el.classList.add("attention-direct", "attention-direct-pad");
  const row = element("div", { class: "attention-direct-row" }, el);
  const pad = element("canvas", { class: "pad-drawing", tabindex: 0, role: "img" }, row);
  keepKeys(pad);
  const side = element("div", { class: "pad-side" }, row);
  element("div", { class: "pad-caption" }, side).textContent = "what the models see: 24 x 24, ink 0..16";
  const seen = element("canvas", { class: "pad-seen" }, side);
  element("div", { class: "pad-caption" }, side).textContent = "the reader's attention (red) as it writes:";
  const tokenBox = element("div", { class: "pad-tokens" }, side);
  const clear = element("button", { type: "button", class: "pad-clear" }, side);
  clear.textContent = "clear";
  element("div", { class: "pad-caption" }, side).textContent =
    "Draw with the mouse, one digit a cell; or focus the pad, move the pen with the arrow keys (Shift: further) and press Space or Enter to put it down or lift it.";
  const readout = element("div", { class: "attention-direct-readout" }, el);

  let view = model.get("view");
  let strokes = []; // the drawing as the learner sees it: the kernel's once nothing is pending
  let drawing = false; // the mouse button or the keyboard pen is down
  let chosen = 0; // the token whose attention is shown
  const cursor = { x: 16, y: 16, shown: false, down: false };
  let connection = null;

  function redraw() {
    if (!view || !view.pad) return;
    const context = pad.getContext("2d");
    drawPad(context, view, strokes, chosen, cursor);
  }

  function copy(drawing) {
    return drawing.map((stroke) => stroke.map((point) => [...point]));
  }

  function send() {
    connection.moved({ strokes: copy(strokes) });
    redraw();
  }

  function choose(index) {
    chosen = index;
    drawTokens(tokenBox, view, chosen, choose);
    redraw();
  }

  function gridPoint(event) {
    const box = pad.getBoundingClientRect();
    const size = view.pad.size;
    const clamp = (v) => Math.min(size, Math.max(0, v));
    return [clamp(((event.clientX - box.left) / box.width) * size), clamp(((event.clientY - box.top) / box.height) * size)];
  }

  pad.addEventListener("pointerdown", (event) => {
    if (event.button !== 0) return;
    pad.setPointerCapture(event.pointerId);
    pad.focus();
    event.preventDefault();
    drawing = true;
    cursor.shown = false;
    strokes.push([gridPoint(event)]);
    send();
  });
  pad.addEventListener("pointermove", (event) => {
    if (!drawing || cursor.down) return;
    const point = gridPoint(event);
    const stroke = strokes[strokes.length - 1];
    const last = stroke[stroke.length - 1];
    if (Math.hypot(point[0] - last[0], point[1] - last[1]) < 0.25) return; // under a screen pixel
    stroke.push(point);
    send();
  });
  const release = () => {
    if (cursor.down) return;
    drawing = false;
  };
  pad.addEventListener("pointerup", release);
  pad.addEventListener("lostpointercapture", release);

  pad.addEventListener("focus", () => {
    cursor.shown = !drawing;
    redraw();
  });
  pad.addEventListener("blur", () => {
    cursor.shown = false;
    cursor.down = false;
    drawing = false;
    redraw();
  });
  pad.addEventListener("keydown", (event) => {
    const steps = { ArrowLeft: [-1, 0], ArrowRight: [1, 0], ArrowUp: [0, -1], ArrowDown: [0, 1] };
    const toggle = event.key === " " || event.key === "Enter";
    if (!(event.key in steps) && !toggle) return;
    event.preventDefault();
    event.stopPropagation();
    cursor.shown = true;
    if (toggle) {
      cursor.down = !cursor.down;
      drawing = cursor.down;
      if (cursor.down) {
        strokes.push([[cursor.x, cursor.y]]);
        send();
      } else {
        redraw();
      }
      return;
    }
    const [dx, dy] = steps[event.key];
    const step = KEY_STEP * (event.shiftKey ? 4 : 1);
    const size = view.pad.size;
    cursor.x = Math.min(size, Math.max(0, cursor.x + dx * step));
    cursor.y = Math.min(size, Math.max(0, cursor.y + dy * step));
    if (cursor.down) {
      strokes[strokes.length - 1].push([cursor.x, cursor.y]);
      send();
    } else {
      redraw();
    }
  });
  clear.addEventListener("click", () => {
    strokes = [];
    cursor.down = false;
    drawing = false;
    send();
  });

  function draw(next) {
    view = next;
    if (!view || !view.pad) return;
    const settled = connection === null || connection.settled(view);
    if (settled) {
      // the kernel's drawing wins (clamped, rounded; cleared from Python) unless a stroke is
      // still being drawn
      if (!drawing) strokes = copy(view.strokes);
    }
    pad.width = view.pad.size * PAD_PX;
    pad.height = view.pad.size * PAD_PX;
    seen.style.width = `${view.counts.length * SEEN_PX}px`;
    seen.style.height = `${view.counts.length * SEEN_PX}px`;
    drawSeen(seen, view.counts);
    chosen = Math.min(chosen, Math.max(0, view.tokens.length - 1));
    drawTokens(tokenBox, view, chosen, choose);
    pad.setAttribute("aria-label", view.title || "drawing pad");
    redraw();
    drawReadout(readout, view);
  }

  connection = connect(model, el, draw);
  return () => connection.forget();
}

export default { render };
