/* graphaudit HTML report: pan/zoom of the diff graphs (viewBox-based), search by node name, and the error charts
   (drawn by the inlined plotly.js from the JSON spec beside each chart). No network. */
(function () {
  "use strict";
  function viewBoxOf(svg) {
    var vb = svg.viewBox.baseVal;
    if (vb && vb.width > 0) return { x: vb.x, y: vb.y, w: vb.width, h: vb.height };
    var bb = svg.getBBox();
    return { x: bb.x, y: bb.y, w: bb.width, h: bb.height };
  }
  function setView(svg, v) { svg.setAttribute("viewBox", v.x + " " + v.y + " " + v.w + " " + v.h); }
  function nodeText(g) {
    var t = g.querySelector("title");
    return ((g.id || "") + " " + (t ? t.textContent : "") + " " + (g.getAttribute("class") || "")).toLowerCase();
  }
  function setup(panel) {
    var view = panel.querySelector(".graph-view");
    var svg = view && view.querySelector("svg");
    if (!svg) return;
    svg.removeAttribute("width");
    svg.removeAttribute("height");
    svg.setAttribute("preserveAspectRatio", "xMidYMid meet");
    var home = viewBoxOf(svg);
    var box = view.getBoundingClientRect(), ratio = box.width > 0 && box.height > 0 ? box.width / box.height : 2;
    var cur = { x: home.x, y: home.y, w: home.w, h: home.h };
    if (box.width > 0 && box.height > 0 && (home.w > 1.5 * box.width || home.h > 1.5 * box.height)) {
      /* larger than the view: start at natural size (readable labels) on the top left, where the legend and
         the graph inputs are; drag to pan, the wheel to zoom, "fit" for the whole graph */
      cur = { x: home.x, y: home.y, w: Math.min(home.w, box.width), h: Math.min(home.h, box.height) };
      if (cur.w / cur.h < ratio) cur.w = cur.h * ratio; else cur.h = cur.w / ratio;
    }
    setView(svg, cur);
    function toSvg(cx, cy) {
      var r = svg.getBoundingClientRect();
      var s = Math.max(cur.w / r.width, cur.h / r.height);
      var ox = cur.x - (r.width * s - cur.w) / 2, oy = cur.y - (r.height * s - cur.h) / 2;
      return { x: ox + (cx - r.left) * s, y: oy + (cy - r.top) * s, s: s };
    }
    function zoom(f, cx, cy) {
      var r = svg.getBoundingClientRect();
      if (cx === undefined) { cx = r.left + r.width / 2; cy = r.top + r.height / 2; }
      var p = toSvg(cx, cy);
      cur = { x: p.x - (p.x - cur.x) * f, y: p.y - (p.y - cur.y) * f, w: cur.w * f, h: cur.h * f };
      setView(svg, cur);
    }
    view.addEventListener("wheel", function (e) {
      e.preventDefault();
      zoom(e.deltaY > 0 ? 1.15 : 1 / 1.15, e.clientX, e.clientY);
    }, { passive: false });
    var drag = null;
    view.addEventListener("pointerdown", function (e) {
      drag = { x: e.clientX, y: e.clientY, v: { x: cur.x, y: cur.y, w: cur.w, h: cur.h }, s: toSvg(0, 0).s };
      view.classList.add("panning");
      view.setPointerCapture(e.pointerId);
    });
    view.addEventListener("pointermove", function (e) {
      if (!drag) return;
      cur = { x: drag.v.x - (e.clientX - drag.x) * drag.s, y: drag.v.y - (e.clientY - drag.y) * drag.s, w: drag.v.w, h: drag.v.h };
      setView(svg, cur);
    });
    function endDrag() { drag = null; view.classList.remove("panning"); }
    view.addEventListener("pointerup", endDrag);
    view.addEventListener("pointercancel", endDrag);
    panel.querySelectorAll("button[data-zoom]").forEach(function (b) {
      b.addEventListener("click", function () {
        var z = b.getAttribute("data-zoom");
        if (z === "in") zoom(1 / 1.4); else if (z === "out") zoom(1.4);
        else { cur = { x: home.x, y: home.y, w: home.w, h: home.h }; setView(svg, cur); }
      });
    });
    var input = panel.querySelector(".graph-search"), out = panel.querySelector(".search-result");
    var nodes = Array.prototype.slice.call(svg.querySelectorAll("g.node:not(.ga-legend)"));
    function search() {
      var q = input.value.trim().toLowerCase();
      var hits = [];
      nodes.forEach(function (g) {
        var hit = q.length > 0 && nodeText(g).indexOf(q) >= 0;
        g.classList.toggle("ga-hit", hit);
        g.classList.toggle("ga-dim", q.length > 0 && !hit);
        if (hit) hits.push(g);
      });
      out.textContent = q ? hits.length + " match" + (hits.length === 1 ? "" : "es") : "";
      if (hits.length) {
        var r = hits[0].getBoundingClientRect(), c = toSvg(r.left + r.width / 2, r.top + r.height / 2);
        var w = Math.max(r.width * c.s * 6, home.w / 6), h = Math.max(r.height * c.s * 6, home.h / 6);
        cur = { x: c.x - w / 2, y: c.y - h / 2, w: w, h: h };
        setView(svg, cur);
      }
    }
    input.addEventListener("input", search);
    input.addEventListener("keydown", function (e) { if (e.key === "Enter") search(); });
  }
  document.querySelectorAll(".graph-panel").forEach(setup);
  function chart(div) {
    var spec = div.parentNode.querySelector("script.chart-spec");
    if (!spec || typeof Plotly === "undefined") return;
    var fig = JSON.parse(spec.textContent);
    Plotly.newPlot(div, fig.data, fig.layout, fig.config);
  }
  document.querySelectorAll(".error-chart").forEach(chart);
})();
