// Points in a plane that the learner drags (or moves with the arrow keys), and what the kernel
// computed for their positions: lines, arrows, markers sized by weight, a bar chart and a table.
// Joined after protocol.js. Every number drawn comes from the kernel's `view`.

const SVG = "http://www.w3.org/2000/svg";
const PLANE = { width: 456, height: 400, left: 52, right: 28, top: 12, bottom: 44 };
const BARS = { width: 300, height: 400, left: 44, right: 8, top: 28, bottom: 44 };

function svgElement(tag, attributes, parent) {
  return element(tag, attributes, parent, SVG);
}

// "foreground" is the theme's text colour (black in the light theme, light in the dark one)
function paint(colour) {
  return colour === "foreground" ? "var(--jp-ui-font-color1, #000)" : colour;
}

function scales(plane) {
  const [x0, x1] = plane.x;
  const [y0, y1] = plane.y;
  const width = PLANE.width - PLANE.left - PLANE.right;
  const height = PLANE.height - PLANE.top - PLANE.bottom;
  return {
    px: (x) => PLANE.left + ((x - x0) / (x1 - x0)) * width,
    py: (y) => PLANE.top + ((y1 - y) / (y1 - y0)) * height,
    x: (px) => x0 + ((px - PLANE.left) / width) * (x1 - x0),
    y: (py) => y1 - ((py - PLANE.top) / height) * (y1 - y0),
  };
}

function clampToPlane(plane, x, y) {
  const clamp = (v, [lo, hi]) => Math.min(hi, Math.max(lo, v));
  return [clamp(x, plane.x), clamp(y, plane.y)];
}

function drawAxes(layer, plane, s) {
  layer.replaceChildren();
  const [x0, x1] = plane.x;
  const [y0, y1] = plane.y;
  svgElement("rect", {
    x: s.px(x0), y: s.py(y1), width: s.px(x1) - s.px(x0), height: s.py(y0) - s.py(y1),
    class: "attention-direct-frame",
  }, layer);
  for (const x of plane.xticks) {
    svgElement("line", { x1: s.px(x), x2: s.px(x), y1: s.py(y0), y2: s.py(y1), class: "grid" }, layer);
    const label = svgElement("text", { x: s.px(x), y: s.py(y0) + 16, class: "tick", "text-anchor": "middle" }, layer);
    label.textContent = String(x);
  }
  for (const y of plane.yticks) {
    svgElement("line", { x1: s.px(x0), x2: s.px(x1), y1: s.py(y), y2: s.py(y), class: "grid" }, layer);
    const label = svgElement("text", { x: s.px(x0) - 6, y: s.py(y) + 4, class: "tick", "text-anchor": "end" }, layer);
    label.textContent = String(y);
  }
  const xlabel = svgElement("text", { x: (s.px(x0) + s.px(x1)) / 2, y: PLANE.height - 6, class: "axis-label", "text-anchor": "middle" }, layer);
  xlabel.textContent = plane.xlabel;
  const ylabel = svgElement("text", { x: 14, y: (s.py(y0) + s.py(y1)) / 2, class: "axis-label", "text-anchor": "middle", transform: `rotate(-90 14 ${(s.py(y0) + s.py(y1)) / 2})` }, layer);
  ylabel.textContent = plane.ylabel;
}

function drawShapes(layer, above, view, s) {
  layer.replaceChildren();
  above.replaceChildren();
  for (const line of view.lines || []) {
    const polyline = svgElement("polyline", {
      points: line.xy.map(([x, y]) => `${s.px(x)},${s.py(y)}`).join(" "),
      "stroke-width": line.width || 2, fill: "none",
      "stroke-dasharray": line.dashed ? "5 4" : "none",
    }, layer);
    polyline.style.stroke = paint(line.colour);
  }
  const labelled = (view.lines || []).filter((line) => line.label);
  labelled.forEach((line, i) => {
    const x = PLANE.width - PLANE.right - 110;
    const y = PLANE.top + 16 + 16 * i;
    svgElement("line", { x1: x, x2: x + 18, y1: y - 4, y2: y - 4, "stroke-width": 2 }, layer).style.stroke = paint(line.colour);
    svgElement("text", { x: x + 24, y, class: "tick" }, layer).textContent = line.label;
  });
  for (const arrow of view.arrows || []) {
    const [[x0, y0], [x1, y1]] = [arrow.from, arrow.to];
    svgElement("line", {
      x1: s.px(x0), y1: s.py(y0), x2: s.px(x1), y2: s.py(y1), stroke: arrow.colour,
      "stroke-width": arrow.width, "stroke-opacity": 0.75, "marker-end": "url(#attention-direct-head)",
    }, layer);
  }
  for (const marker of view.markers || []) {
    // a marker "above" the points (an output) stays visible when a point is dragged onto it
    const node = svgElement("circle", {
      cx: s.px(marker.x), cy: s.py(marker.y), r: marker.radius, fill: marker.colour,
      "fill-opacity": marker.opacity ?? 0.35, stroke: marker.edge || "none", "stroke-width": 2,
    }, marker.above ? above : layer);
    if (marker.label) svgElement("title", {}, node).textContent = marker.label;
  }
}

function drawBars(svg, bars) {
  svg.replaceChildren();
  if (!bars) return;
  const width = BARS.width - BARS.left - BARS.right;
  const height = BARS.height - BARS.top - BARS.bottom;
  const py = (v) => BARS.top + height * (1 - v / bars.ymax);
  const groups = bars.labels.length;
  const slot = width / groups;
  const barWidth = (slot * 0.8) / bars.series.length;
  const title = svgElement("text", { x: BARS.width / 2, y: 16, class: "axis-label", "text-anchor": "middle" }, svg);
  title.textContent = bars.title;
  for (const v of [0, bars.ymax / 2, bars.ymax]) {
    svgElement("line", { x1: BARS.left, x2: BARS.width - BARS.right, y1: py(v), y2: py(v), class: "grid" }, svg);
    const tick = svgElement("text", { x: BARS.left - 5, y: py(v) + 4, class: "tick", "text-anchor": "end" }, svg);
    tick.textContent = v.toFixed(2);
  }
  bars.labels.forEach((label, g) => {
    bars.series.forEach((series, i) => {
      const value = Math.min(series.values[g], bars.ymax);
      svgElement("rect", {
        x: BARS.left + g * slot + slot * 0.1 + i * barWidth, y: py(value), width: barWidth,
        height: py(0) - py(value), fill: series.colour,
      }, svg);
    });
    const text = svgElement("text", { x: BARS.left + (g + 0.5) * slot, y: py(0) + 16, class: "tick", "text-anchor": "middle" }, svg);
    text.textContent = label;
  });
  const legendX = BARS.width - BARS.right - 124;
  svgElement("rect", { x: legendX - 4, y: BARS.top + 1, width: 124, height: 15 * bars.series.length + 4, class: "legend-backing" }, svg);
  bars.series.forEach((series, i) => {
    const y = BARS.top + 14 + 15 * i;
    const x = legendX;
    svgElement("rect", { x, y: y - 9, width: 10, height: 10, fill: series.colour }, svg);
    svgElement("text", { x: x + 14, y, class: "tick" }, svg).textContent = series.name;
  });
}

function render({ model, el }) {
  el.classList.add("attention-direct", "attention-direct-plane");
  const row = element("div", { class: "attention-direct-row" }, el);
  const plane = svgElement("svg", { width: PLANE.width, height: PLANE.height, class: "attention-direct-plane-svg" }, row);
  const defs = svgElement("defs", {}, plane);
  // arrowheads of one size whatever the arrow's width (the width shows the weight)
  const head = svgElement("marker", { id: "attention-direct-head", viewBox: "0 0 10 10", refX: 9, refY: 5, markerWidth: 9, markerHeight: 9, markerUnits: "userSpaceOnUse", orient: "auto-start-reverse" }, defs);
  svgElement("path", { d: "M 0 0 L 10 5 L 0 10 z", fill: "context-stroke" }, head);
  const axes = svgElement("g", {}, plane);
  const shapes = svgElement("g", {}, plane);
  const handles = svgElement("g", {}, plane);
  const above = svgElement("g", { "pointer-events": "none" }, plane);
  const bars = svgElement("svg", { width: BARS.width, height: BARS.height, class: "attention-direct-bars" }, row);
  const readout = element("div", { class: "attention-direct-readout" }, el);

  let view = model.get("view");
  let axesFor = null; // the plane the axes were drawn for
  let positions = {}; // name -> [x, y], as the learner left them
  let dragging = null; // the name of the point under the pointer
  const nodes = {}; // name -> the point's <g>
  let connection = null;

  function placeHandle(name) {
    const s = scales(view.plane);
    const [x, y] = positions[name];
    nodes[name].setAttribute("transform", `translate(${s.px(x)},${s.py(y)})`);
    const point = view.points.find((p) => p.name === name);
    nodes[name].setAttribute("aria-label", `${point.label || point.name} at (${x.toFixed(2)}, ${y.toFixed(2)})`);
  }

  function makeHandle(point) {
    // the points listed first are drawn on top (the query above the keys or training points)
    const node = svgElement("g", { class: "attention-direct-point", tabindex: 0, role: "button", "data-name": point.name }, null);
    handles.prepend(node);
    keepKeys(node);
    const radius = point.radius || 9;
    svgElement("circle", { r: radius, fill: point.colour, stroke: "white", "stroke-width": 2 }, node);
    const label = svgElement("text", { x: radius + 2, y: -radius, class: "point-label" }, node);
    label.textContent = point.label;
    node.addEventListener("pointerdown", (event) => {
      dragging = point.name;
      node.setPointerCapture(event.pointerId);
      node.focus();
      event.preventDefault();
    });
    node.addEventListener("pointermove", (event) => {
      if (dragging !== point.name) return;
      const box = plane.getBoundingClientRect();
      const s = scales(view.plane);
      let [x, y] = clampToPlane(view.plane, s.x(event.clientX - box.left), s.y(event.clientY - box.top));
      if (point.drag === "x") y = positions[point.name][1];
      positions[point.name] = [x, y];
      placeHandle(point.name);
      connection.moved({ points: { ...positions } });
    });
    const release = () => {
      dragging = null;
    };
    node.addEventListener("pointerup", release);
    node.addEventListener("lostpointercapture", release);
    node.addEventListener("keydown", (event) => {
      const steps = { ArrowLeft: [-1, 0], ArrowRight: [1, 0], ArrowUp: [0, 1], ArrowDown: [0, -1] };
      if (!(event.key in steps)) return;
      event.preventDefault();
      event.stopPropagation();
      let [dx, dy] = steps[event.key];
      if (point.drag === "x") dy = 0;
      const step = view.plane.step * (event.shiftKey ? 10 : 1);
      const [x, y] = positions[point.name];
      positions[point.name] = clampToPlane(view.plane, x + dx * step, y + dy * step);
      placeHandle(point.name);
      connection.moved({ points: { ...positions } });
    });
    nodes[point.name] = node;
  }

  function draw(next) {
    view = next;
    if (!view || !view.plane) return;
    const s = scales(view.plane);
    const planeKey = JSON.stringify(view.plane);
    if (planeKey !== axesFor) {
      drawAxes(axes, view.plane, s);
      axesFor = planeKey;
    }
    drawShapes(shapes, above, view, s);
    // the kernel's positions (clamped, rounded) once no move of the learner's is still pending
    const settled = connection === null || connection.settled(view);
    for (const point of view.points) {
      if (!(point.name in nodes)) makeHandle(point);
      if (settled && point.name !== dragging) positions[point.name] = [point.x, point.y];
      if (point.drag === "x") positions[point.name][1] = point.y; // the kernel places it in y
      placeHandle(point.name);
    }
    drawBars(bars, view.bars);
    drawReadout(readout, view);
  }

  connection = connect(model, el, draw);
  return () => connection.forget();
}

export default { render };
