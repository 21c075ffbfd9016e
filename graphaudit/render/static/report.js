/* graphaudit HTML report: the diff graphs (viewBox pan/zoom, opened centred on their first divergence at the SVG's
   natural scale, search by node name), the charts (drawn by the inlined plotly.js from the JSON spec beside each), and
   the links between them: a verdict node or finding location opens its graph centred on the node; a chart point opens
   the graph on the node computing its tensor; a graph node click marks the findings and chart points naming it.
   No network. */
(function () {
  "use strict";
  var graphs = {};  /* panel DOM id -> graph API */

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
  function lengthPx(text) {  /* an SVG width/height attribute ("123pt", "90px", "12") in CSS pixels */
    var m = /^([0-9.]+)\s*(pt|px|in|cm|mm)?$/.exec((text || "").trim());
    if (!m) return 0;
    return parseFloat(m[1]) * ({ pt: 4 / 3, px: 1, "in": 96, cm: 96 / 2.54, mm: 96 / 25.4 }[m[2] || "px"]);
  }
  function jsonOf(el, sel) {
    var s = el.querySelector(sel);
    return s ? JSON.parse(s.textContent) : {};
  }

  function setup(panel) {
    var view = panel.querySelector(".graph-view");
    var svg = view && view.querySelector("svg");
    if (!svg) return;
    var home = viewBoxOf(svg);
    /* the SVG's natural scale (Graphviz writes its size in pt): CSS px per user unit, labels as Graphviz set them */
    var natural = lengthPx(svg.getAttribute("width")) / home.w || 1;
    svg.removeAttribute("width");
    svg.removeAttribute("height");
    svg.setAttribute("preserveAspectRatio", "xMidYMid meet");
    var cur = { x: home.x, y: home.y, w: home.w, h: home.h };
    var index = jsonOf(panel, "script.graph-index");
    var status = panel.querySelector(".graph-status");
    var nodes = Array.prototype.slice.call(svg.querySelectorAll("g.node:not(.ga-legend)"));
    var byId = {};
    nodes.forEach(function (g) { byId[g.id] = g; });

    function toSvg(cx, cy) {
      var r = svg.getBoundingClientRect();
      var s = Math.max(cur.w / r.width, cur.h / r.height);
      var ox = cur.x - (r.width * s - cur.w) / 2, oy = cur.y - (r.height * s - cur.h) / 2;
      return { x: ox + (cx - r.left) * s, y: oy + (cy - r.top) * s, s: s };
    }
    function show(v) { cur = v; setView(svg, cur); }
    function atNatural(cx, cy) {  /* a view of the box's size at the natural scale, centred on (cx, cy) */
      var r = view.getBoundingClientRect();
      var w = (r.width || 800) / natural, h = (r.height || 600) / natural;
      show({ x: cx - w / 2, y: cy - h / 2, w: w, h: h });
    }
    function centreOn(el) {  /* centre the element, at the natural scale (or the current one, when closer) */
      var r = el.getBoundingClientRect(), c = toSvg(r.left + r.width / 2, r.top + r.height / 2);
      atNatural(c.x, c.y);
    }
    function whole() { show({ x: home.x, y: home.y, w: home.w, h: home.h }); }
    function opening() {
      var el = byId[panel.getAttribute("data-start")];
      if (el) { centreOn(el); return; }
      var vr = view.getBoundingClientRect();
      if (home.w * natural <= vr.width && home.h * natural <= vr.height) { whole(); return; }
      /* no numbers: the top of the graph (its inputs, below the legend and title) at the natural scale */
      var first = svg.querySelector("g.ga-io") || nodes[0];
      if (!first) { whole(); return; }
      var fr = first.getBoundingClientRect(), c = toSvg(fr.left + fr.width / 2, fr.top);
      atNatural(c.x, c.y + (vr.height / natural) / 2 - 20 / natural);
    }
    function zoom(f, cx, cy) {
      var r = svg.getBoundingClientRect();
      if (cx === undefined) { cx = r.left + r.width / 2; cy = r.top + r.height / 2; }
      var p = toSvg(cx, cy);
      show({ x: p.x - (p.x - cur.x) * f, y: p.y - (p.y - cur.y) * f, w: cur.w * f, h: cur.h * f });
    }
    function mark(el) {
      nodes.forEach(function (g) { g.classList.remove("ga-sel"); });
      if (el) el.classList.add("ga-sel");
    }
    opening();

    view.addEventListener("wheel", function (e) {
      e.preventDefault();
      zoom(e.deltaY > 0 ? 1.15 : 1 / 1.15, e.clientX, e.clientY);
    }, { passive: false });
    var drag = null;
    view.addEventListener("pointerdown", function (e) {
      drag = { x: e.clientX, y: e.clientY, v: { x: cur.x, y: cur.y, w: cur.w, h: cur.h }, s: toSvg(0, 0).s,
               moved: false, target: e.target };
      view.classList.add("panning");
      view.setPointerCapture(e.pointerId);
    });
    view.addEventListener("pointermove", function (e) {
      if (!drag) return;
      if (Math.abs(e.clientX - drag.x) + Math.abs(e.clientY - drag.y) > 4) drag.moved = true;
      show({ x: drag.v.x - (e.clientX - drag.x) * drag.s, y: drag.v.y - (e.clientY - drag.y) * drag.s,
             w: drag.v.w, h: drag.v.h });
    });
    function endDrag(e) {
      var d = drag;
      drag = null;
      view.classList.remove("panning");
      if (d && !d.moved && e.type === "pointerup") {  /* a click, not a pan: what names this node */
        var g = d.target.closest && d.target.closest("g.node");
        if (g && byId[g.id]) { mark(g); namedBy(panel, g.id, status); }
      }
    }
    view.addEventListener("pointerup", endDrag);
    view.addEventListener("pointercancel", endDrag);
    panel.querySelectorAll("button[data-zoom]").forEach(function (b) {
      b.addEventListener("click", function () {
        var z = b.getAttribute("data-zoom");
        if (z === "in") zoom(1 / 1.4); else if (z === "out") zoom(1.4);
        else if (z === "start") { mark(null); opening(); } else whole();
      });
    });
    var input = panel.querySelector(".graph-search"), out = panel.querySelector(".search-result");
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
      if (hits.length) centreOn(hits[0]);
    }
    input.addEventListener("input", search);
    input.addEventListener("keydown", function (e) { if (e.key === "Enter") search(); });

    graphs[panel.id] = {
      index: index,
      /* open on an element id (or a name through the index): scroll the panel into view, centre, highlight */
      open: function (elId, name) {
        var el = byId[elId] || byId[index[name]];
        panel.scrollIntoView({ block: "start" });
        if (!el) {
          if (status) status.textContent = (name || elId) + " is not drawn in this view (the automatic focus left it out).";
          return false;
        }
        centreOn(el);
        mark(el);
        namedBy(panel, el.id, status);
        return true;
      }
    };
  }

  function flash(el) {
    el.classList.remove("ga-linked");
    void el.offsetWidth;
    el.classList.add("ga-linked");
  }
  /* what on the page names graph element elId of this panel: verdict and finding links, chart points */
  function namedBy(panel, elId, status) {
    document.querySelectorAll(".ga-linked").forEach(function (e) { e.classList.remove("ga-linked"); });
    var found = [];
    document.querySelectorAll("a.node-link").forEach(function (a) {
      if (a.getAttribute("data-panel") !== panel.id || a.getAttribute("data-el") !== elId) return;
      var row = a.closest("tr, li") || a;
      flash(row);
      found.push({ label: row.closest(".verdict") ? "verdict line" : "finding " + ((row.querySelector("b") || {}).textContent || ""), el: row });
    });
    var g = graphs[panel.id], hits = 0;
    document.querySelectorAll('.error-chart[data-panel="' + panel.id + '"]').forEach(function (div) {
      var n = markPoints(div, function (name) { return g && g.index[name] === elId; });
      hits += n;
      if (n) found.push({ label: n === 1 ? "chart point" : n + " chart points", el: div });
    });
    if (!status) return;
    var t = (titleOf(panel, elId) || {}).textContent || "";
    status.textContent = "";
    var what = (t.trim().split("\n")[0] || elId).replace(/^(n|a[0-9]*|in|out|chain):/, "");
    status.appendChild(document.createTextNode(what + ": "));
    if (!found.length) status.appendChild(document.createTextNode("no finding or chart point names this node."));
    found.forEach(function (f, k) {
      var b = document.createElement("button");
      b.type = "button";
      b.className = "link";
      b.textContent = f.label;
      b.addEventListener("click", function () { f.el.scrollIntoView({ block: "center" }); flash(f.el); });
      status.appendChild(b);
      if (k < found.length - 1) status.appendChild(document.createTextNode(" "));
    });
  }
  function titleOf(panel, elId) {
    var t = null;
    panel.querySelectorAll("g.node").forEach(function (g) { if (g.id === elId) t = g.querySelector("title"); });
    return t;
  }
  /* ring the chart points whose customdata passes `want` (a trace added on demand); returns how many */
  function markPoints(div, want) {
    if (!div.data || typeof Plotly === "undefined") return 0;
    var xs = [], ys = [];
    div.data.forEach(function (tr) {
      if (tr.name === "selected" || !tr.customdata) return;
      tr.customdata.forEach(function (c, k) { if (c && want(c)) { xs.push(tr.x[k]); ys.push(tr.y[k]); } });
    });
    var at = div.data.findIndex(function (tr) { return tr.name === "selected"; });
    if (at >= 0) Plotly.deleteTraces(div, at);
    if (xs.length) {
      Plotly.addTraces(div, { x: xs, y: ys, mode: "markers", name: "selected", hoverinfo: "skip", showlegend: false,
                              marker: { size: 16, symbol: "circle-open", color: "#ff006e", line: { width: 3 } } });
    }
    return xs.length;
  }

  function panelFor(scope) {
    var hit = null;
    document.querySelectorAll(".graph-panel").forEach(function (p) {
      if (!hit && p.getAttribute("data-scope") === scope && graphs[p.id]) hit = p;
    });
    return hit;
  }
  function chart(div) {
    var spec = div.parentNode.querySelector("script.chart-spec");
    if (!spec || typeof Plotly === "undefined") return;
    var fig = JSON.parse(spec.textContent);
    Plotly.newPlot(div, fig.data, fig.layout, fig.config);
    div.on("plotly_click", function (ev) {
      var pt = ev.points && ev.points[0], c = pt && pt.customdata;
      if (!c) return;
      if (div.classList.contains("stage-chart")) {  /* a transition: its graph, on its opening node */
        var p = panelFor(c);
        if (p) { p.scrollIntoView({ block: "start" }); p.querySelector('button[data-zoom="start"]') &&
                 p.querySelector('button[data-zoom="start"]').click(); }
        return;
      }
      var g = graphs[div.getAttribute("data-panel")];
      if (g) g.open(null, c);
    });
  }

  document.querySelectorAll(".graph-panel").forEach(setup);
  document.querySelectorAll(".error-chart, .stage-chart").forEach(chart);
  document.querySelectorAll("a.node-link").forEach(function (a) {
    a.addEventListener("click", function (e) {
      var g = graphs[a.getAttribute("data-panel")];
      if (!g) return;
      e.preventDefault();
      g.open(a.getAttribute("data-el"), a.textContent);
    });
  });
})();
