// The console's only script besides htmx (no inline scripts: the CSP forbids them).
// 1. A server-rendered <dialog open> becomes modal (focus stays inside; Escape closes it).
// 2. Training logs arrive live over Server-Sent Events; lines are added as text, never HTML.
//    A state event refreshes the run's status fragment.
// 3. On narrow screens the sidebar's links fold behind a Menu button.
// 4. Times (<time datetime>, shown in UTC by the server) read in the reader's own time zone:
//    relative ("5 minutes ago"), the exact local time on hover.
(function () {
  "use strict";

  function modalDialogs() {
    document.querySelectorAll("dialog[open][data-close-href]").forEach(function (d) {
      if (typeof d.showModal === "function") {
        d.removeAttribute("open");
        d.showModal();
        var first = d.querySelector("[autofocus]") || d.querySelector("input, button, a");
        if (first) { first.focus(); }
      }
      d.addEventListener("cancel", function () {
        window.location.assign(d.getAttribute("data-close-href"));
      });
    });
  }

  function liveLogs() {
    var list = document.querySelector("[data-log-stream]");
    if (!list || typeof EventSource === "undefined") { return; }
    var source = new EventSource(list.getAttribute("data-log-stream"));
    source.addEventListener("log", function (e) {
      var line = JSON.parse(e.data);
      var item = document.createElement("li");
      item.textContent = line.text;
      item.setAttribute("data-seq", String(line.seq));
      list.appendChild(item);
    });
    // A new state refreshes the run's status fragment now (the server renders it: state,
    // Pod, adapter and actions from one reading), never one field of it from here.
    source.addEventListener("state", function () {
      var status = document.getElementById("run-status");
      if (status && status.hasAttribute("hx-get") && window.htmx) {
        window.htmx.trigger(status, "refresh");
      }
    });
    source.addEventListener("end", function () {
      source.close();
      list.setAttribute("data-ended", "true");
    });
  }

  function foldingMenu() {
    var button = document.querySelector(".sidebar button.menu");
    var body = document.getElementById("nav-body");
    if (!button || !body || typeof window.matchMedia !== "function") { return; }
    var narrow = window.matchMedia("(max-width: 48rem)");
    function open(yes) {
      button.setAttribute("aria-expanded", yes ? "true" : "false");
      body.classList.toggle("collapsed", !yes);
    }
    function fit() {
      button.hidden = !narrow.matches;
      open(!narrow.matches);
    }
    button.addEventListener("click", function () {
      open(button.getAttribute("aria-expanded") !== "true");
    });
    narrow.addEventListener("change", fit);
    fit();
  }

  var UNITS = [["year", 31536000], ["month", 2592000], ["week", 604800], ["day", 86400],
    ["hour", 3600], ["minute", 60], ["second", 1]];

  function localTimes(root) {
    if (typeof Intl === "undefined" || !Intl.RelativeTimeFormat) { return; }
    var relative = new Intl.RelativeTimeFormat(undefined, { numeric: "auto" });
    var exact = new Intl.DateTimeFormat(undefined, {
      dateStyle: "medium", timeStyle: "long"
    });
    root.querySelectorAll("time[datetime]:not([data-local])").forEach(function (el) {
      var at = new Date(el.getAttribute("datetime"));
      if (isNaN(at.getTime())) { return; }
      var seconds = (at.getTime() - Date.now()) / 1000;
      var unit = UNITS.find(function (u) { return Math.abs(seconds) >= u[1]; }) || UNITS[6];
      el.textContent = relative.format(Math.round(seconds / unit[1]), unit[0]);
      el.setAttribute("title", exact.format(at));
      el.setAttribute("data-local", "true");
    });
  }

  document.addEventListener("DOMContentLoaded", function () {
    localTimes(document);
    document.body.addEventListener("htmx:afterSettle", function () { localTimes(document); });
    foldingMenu();
    modalDialogs();
    liveLogs();
  });
})();
