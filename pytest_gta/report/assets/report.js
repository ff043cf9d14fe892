// pytest-gta HTML report: filters, sorting, search, drill-downs and the image viewer.
// The page works offline: everything it shows is in the file; this script only arranges it.
(function () {
  "use strict";
  var body = document.body;
  var violations = 0;
  document.addEventListener("securitypolicyviolation", function () {
    violations += 1;
    body.setAttribute("data-csp-violations", String(violations));
  });
  var images = {};
  try {
    images = JSON.parse(document.getElementById("gta-images").textContent || "{}");
  } catch (e) {
    images = {};
  }
  var table = document.getElementById("case-table");
  var rows = table ? Array.prototype.slice.call(table.tBodies[0].rows) : [];
  var shown = document.getElementById("shown");
  var search = document.getElementById("search");
  var selects = Array.prototype.slice.call(document.querySelectorAll("select[data-filter]"));

  function applyFilters() {
    var needle = search ? search.value.trim().toLowerCase() : "";
    var visible = 0;
    rows.forEach(function (row) {
      var ok = selects.every(function (select) {
        var want = select.value;
        if (!want) { return true; }
        var have = row.getAttribute("data-" + select.getAttribute("data-filter")) || "";
        return have.split(" ").indexOf(want) >= 0;
      });
      if (ok && needle) { ok = (row.getAttribute("data-search") || "").indexOf(needle) >= 0; }
      row.hidden = !ok;
      if (ok) { visible += 1; }
    });
    if (shown) { shown.textContent = visible + " of " + rows.length + " cases"; }
  }
  selects.forEach(function (select) { select.addEventListener("change", applyFilters); });
  if (search) { search.addEventListener("input", applyFilters); }

  function sortBy(th) {
    var col = Number(th.getAttribute("data-col"));
    var numeric = th.getAttribute("data-kind") === "num";
    var dir = th.getAttribute("data-dir") === "asc" ? "desc" : "asc";
    Array.prototype.forEach.call(th.parentNode.children, function (other) {
      other.removeAttribute("data-dir");
    });
    th.setAttribute("data-dir", dir);
    var keyed = rows.map(function (row, index) {
      var cell = row.cells[col];
      var key = numeric ? Number(cell.getAttribute("data-sort")) : cell.textContent.toLowerCase();
      return { row: row, key: key, index: index };
    });
    keyed.sort(function (a, b) {
      if (a.key < b.key) { return dir === "asc" ? -1 : 1; }
      if (a.key > b.key) { return dir === "asc" ? 1 : -1; }
      return a.index - b.index;
    });
    var tbody = table.tBodies[0];
    keyed.forEach(function (item) { tbody.appendChild(item.row); });
    rows = keyed.map(function (item) { return item.row; });
  }
  if (table) {
    Array.prototype.forEach.call(table.tHead.rows[0].cells, function (th) {
      th.addEventListener("click", function () { sortBy(th); });
      th.addEventListener("keydown", function (event) {
        if (event.key === "Enter") { sortBy(th); }
      });
    });
  }

  function hydrate(root) {
    Array.prototype.forEach.call(root.querySelectorAll("img[data-key]"), function (img) {
      var entry = images[img.getAttribute("data-key")];
      if (entry && entry.thumb) {
        img.src = entry.thumb;
      } else {
        img.parentNode.classList.add("missing");
      }
    });
  }

  var panel = document.getElementById("drilldown");
  function openCase(id) {
    var template = document.getElementById("t-" + id);
    if (!template || !panel) { return false; }
    panel.textContent = "";
    var close = document.createElement("button");
    close.type = "button";
    close.className = "close";
    close.textContent = "close";
    close.addEventListener("click", function () {
      panel.hidden = true;
      history.replaceState(null, "", "#cases");
    });
    panel.appendChild(close);
    panel.appendChild(document.importNode(template.content, true));
    hydrate(panel);
    panel.hidden = false;
    panel.setAttribute("data-case", id);
    rows.forEach(function (row) {
      row.classList.toggle("current", row.getAttribute("data-id") === id);
    });
    panel.scrollTop = 0;
    return true;
  }
  function fromHash() {
    var match = /^#case=(.+)$/.exec(decodeURIComponent(location.hash || ""));
    if (match) { openCase(match[1]); }
  }
  window.addEventListener("hashchange", fromHash);

  var lightbox = document.getElementById("lightbox");
  document.addEventListener("click", function (event) {
    var button = event.target.closest ? event.target.closest("button.thumb") : null;
    if (button && lightbox) {
      var entry = images[button.getAttribute("data-img")] || {};
      var img = lightbox.querySelector("img");
      img.src = entry.full || entry.thumb || "";
      lightbox.querySelector("p").textContent =
        button.getAttribute("title") + (entry.full ? "" : " (thumbnail only: the full size was left out to keep the report small)");
      lightbox.hidden = false;
      return;
    }
    if (lightbox && !lightbox.hidden && event.target.closest && event.target.closest("#lightbox")) {
      lightbox.hidden = true;
    }
  });
  document.addEventListener("keydown", function (event) {
    if (event.key === "Escape" && lightbox) { lightbox.hidden = true; }
  });

  applyFilters();
  fromHash();
  body.setAttribute("data-csp-violations", String(violations));
  body.setAttribute("data-ready", "1");
})();
