// The conversation with the kernel, shared by every widget you drag or draw on (Python joins
// this file to the widget's own drawing code: see helpers/widgets/direct.py).
//
// The browser sends what the learner did (positions, a drawing) as the `request` trait; the
// kernel answers with the `view` trait, every number in it computed by helpers/. Only one
// request is on its way at a time: moves made meanwhile are folded into the next one, so a fast
// drag never queues up behind a busy kernel.

const KERNEL_SILENT_MS = 3000; // no answer for this long: send the latest anyway

function connect(model, el, draw) {
  let sent = 0; // the number of the last request sent
  let sentAt = 0;
  let latest = null; // the payload of moves not sent yet
  let oldestMove = null; // when the oldest of those moves happened
  const moveTimes = new Map(); // request number -> its oldest move's time
  el.roundTrips = []; // ms from a move to the redraw that first shows it (read by make bench)

  function send() {
    const now = performance.now();
    if (latest === null || (sent > model.get("view").seq && now - sentAt < KERNEL_SILENT_MS)) {
      return; // nothing new, or an answer is still on its way
    }
    sent = Math.max(sent, model.get("view").seq) + 1;
    sentAt = now;
    moveTimes.set(sent, oldestMove);
    model.set("request", { ...latest, seq: sent });
    model.save_changes();
    latest = null;
    oldestMove = null;
  }

  function onView() {
    const view = model.get("view");
    draw(view);
    el.dataset.settled = String(latest === null && view.seq >= sent);
    const movedAt = moveTimes.get(view.seq);
    if (movedAt !== undefined) {
      moveTimes.delete(view.seq);
      requestAnimationFrame(() => el.roundTrips.push(performance.now() - movedAt));
    }
    send(); // moves made while this answer was on its way
  }

  model.on("change:view", onView);
  draw(model.get("view"));
  el.dataset.settled = "true"; // read by the browser test: every move answered and drawn
  return {
    // the learner did something: payload is the whole new state (positions, drawing)
    moved(payload) {
      latest = payload;
      el.dataset.settled = "false";
      if (oldestMove === null) oldestMove = performance.now();
      send();
    },
    // no move is waiting or on its way: the view shows where the learner left everything
    settled(view) {
      return latest === null && view.seq >= sent;
    },
    forget() {
      model.off("change:view", onView);
    },
  };
}

function element(tag, attributes = {}, parent = null, namespace = null) {
  const made = namespace ? document.createElementNS(namespace, tag) : document.createElement(tag);
  for (const [name, value] of Object.entries(attributes)) made.setAttribute(name, value);
  if (parent) parent.appendChild(made);
  return made;
}

// Arrow keys belong to the focused widget, not to the notebook (which would move between cells).
function keepKeys(node) {
  node.setAttribute("data-lm-suppress-shortcuts", "true");
}

// The readout: a title, the numbers as a table of texts (formatted by the kernel), a problem.
function drawReadout(box, view) {
  box.replaceChildren();
  if (view.title) element("div", { class: "attention-direct-title" }, box).textContent = view.title;
  if (view.problem) {
    element("div", { class: "attention-direct-problem" }, box).textContent = `⚠ ${view.problem}`;
  }
  if (!view.table) return;
  const table = element("table", { class: "attention-direct-table" }, box);
  const head = element("tr", {}, element("thead", {}, table));
  for (const name of view.table.columns) element("th", {}, head).textContent = name;
  const body = element("tbody", {}, table);
  for (const row of view.table.rows) {
    const line = element("tr", {}, body);
    for (const cell of row) element("td", {}, line).textContent = cell;
  }
}
