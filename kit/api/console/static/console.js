// cronfleet console: progressive enhancement only. Every page works without it.
(function () {
  "use strict";

  // Forms with data-confirm ask first (cancel, replay).
  document.addEventListener("submit", function (event) {
    var form = event.target;
    var question = form.getAttribute && form.getAttribute("data-confirm");
    if (question && !window.confirm(question)) event.preventDefault();
  });

  // A bulk form's "all" box ticks every run of its table.
  document.addEventListener("change", function (event) {
    var box = event.target;
    if (!box.classList || !box.classList.contains("all")) return;
    var table = box.closest("table");
    if (!table) return;
    table.querySelectorAll("tbody input[type=checkbox]").forEach(function (b) { b.checked = box.checked; });
  });

  // Times: show the reader's local time on hover.
  function localTimes(root) {
    root.querySelectorAll("time[datetime]").forEach(function (el) {
      var d = new Date(el.getAttribute("datetime"));
      if (!isNaN(d)) el.title = d.toLocaleString();
    });
  }
  localTimes(document);

  // Sections with data-refresh="N" reload their content every N seconds while the tab is
  // visible and no form inside has focus (a job's runs, the fleet).
  document.querySelectorAll("[data-refresh]").forEach(function (section) {
    var every = Math.max(2, parseInt(section.getAttribute("data-refresh"), 10) || 5) * 1000;
    setInterval(function () {
      if (document.hidden || section.contains(document.activeElement)) return;
      fetch(window.location.href, { credentials: "same-origin" })
        .then(function (r) { return r.ok ? r.text() : null; })
        .then(function (html) {
          if (!html) return;
          var fresh = new DOMParser().parseFromString(html, "text/html").getElementById(section.id);
          if (fresh) { section.innerHTML = fresh.innerHTML; localTimes(section); }
        })
        .catch(function () {});
    }, every);
  });

  // The edit form's schedule: preview the next fires as you type.
  document.querySelectorAll("[data-preview-for]").forEach(function (box) {
    var fieldset = document.getElementById(box.getAttribute("data-preview-for"));
    if (!fieldset) return;
    var timer = null;
    function update() {
      var params = new URLSearchParams();
      ["cron", "timezone", "every_s", "anchor", "at"].forEach(function (name) {
        var input = fieldset.querySelector("[name=schedule_" + name + "]");
        if (input && input.value.trim()) params.set(name, input.value.trim());
      });
      fetch("/console/preview?" + params.toString(), { credentials: "same-origin" })
        .then(function (r) { return r.text(); })
        .then(function (html) { box.innerHTML = "<b>Next fires</b>" + html; })
        .catch(function () {});
    }
    fieldset.addEventListener("input", function () {
      clearTimeout(timer);
      timer = setTimeout(update, 300);
    });
    update();
  });
})();
