// Refreshes the parts of a page marked data-refresh every few seconds: the page is
// fetched again and those elements are swapped for their new versions. Forms and
// everything else stay as the user left them. Nothing runs on pages without them.
// Pointing at a chart's point shows its value and time under the chart.
(function () {
  "use strict";
  document.addEventListener("mouseover", function (event) {
    var point = event.target.closest ? event.target.closest(".chart-point") : null;
    if (!point) { return; }
    var box = point.closest(".chart-box") || point.closest("svg").parentNode;
    var readout = box.querySelector(".chart-readout");
    if (!readout) {
      readout = document.createElement("p");
      readout.className = "chart-readout";
      readout.setAttribute("aria-live", "polite");
      box.appendChild(readout);
    }
    readout.textContent = point.dataset.label || "";
  });
})();
(function () {
  "use strict";
  var REFRESH_MS = parseInt(document.body.dataset.refreshMs, 10) || 5000;
  var marked = document.querySelectorAll("[data-refresh][id]");
  if (marked.length === 0) { return; }
  function refresh() {
    fetch(window.location.href, { headers: { "Accept": "text/html" } })
      .then(function (response) { return response.ok ? response.text() : null; })
      .then(function (text) {
        if (text === null) { return; }
        var fresh = new DOMParser().parseFromString(text, "text/html");
        marked.forEach(function (element) {
          var replacement = fresh.getElementById(element.id);
          if (replacement) { element.replaceWith(replacement); }
        });
        marked = document.querySelectorAll("[data-refresh][id]");
      })
      .catch(function () { /* the next round tries again */ })
      .finally(function () { window.setTimeout(refresh, REFRESH_MS); });
  }
  window.setTimeout(refresh, REFRESH_MS);
})();
