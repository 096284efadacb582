// leased dashboard: live updates, confirmations, filters that apply themselves. No framework, no build.
//
// Live updates re-fetch the page and swap <main>, but hold off while the reader is busy with it:
// a traceback open, a field focused, text selected, or the tab hidden. A refresh would close the
// traceback, steal the focus or drop the selection.
(function () {
  "use strict";

  var seconds = parseFloat(document.body.dataset.refreshSeconds || "0");
  var toggle = document.getElementById("live-toggle");
  var label = document.getElementById("live-label");
  var storageKey = "leased.dashboard.live";
  var busy = false;

  function content() { return document.getElementById("content"); }

  function paused() {
    try { return window.localStorage.getItem(storageKey) === "off"; } catch (e) { return false; }
  }

  function holdReason() {
    var main = content();
    if (document.hidden) return "hidden";
    if (main.querySelector("details[open]")) return "traceback open";
    var active = document.activeElement;
    if (active && main.contains(active) && /^(INPUT|SELECT|TEXTAREA)$/.test(active.tagName)) return "editing";
    var selection = window.getSelection();
    if (selection && !selection.isCollapsed && main.contains(selection.anchorNode)) return "text selected";
    return null;
  }

  function showState() {
    if (!toggle) return;
    var reason = paused() ? "Paused" : holdReason();
    toggle.setAttribute("aria-pressed", paused() ? "false" : "true");
    toggle.classList.toggle("held", !!reason && !paused());
    label.textContent = paused() ? "Paused" : reason && reason !== "hidden" ? "Held: " + reason : "Live";
  }

  function localTimes(root) {
    var times = root.querySelectorAll("time[datetime]");
    for (var i = 0; i < times.length; i++) {
      var when = new Date(times[i].getAttribute("datetime"));
      if (!isNaN(when)) times[i].title = when.toLocaleString() + " (" + times[i].title + ")";
    }
  }

  function refresh() {
    if (busy || paused() || holdReason()) { showState(); return; }
    busy = true;
    fetch(window.location.href, { credentials: "same-origin", cache: "no-store", headers: { "X-Leased-Refresh": "1" } })
      .then(function (response) {
        if (!response.ok || response.redirected) throw new Error("status " + response.status);
        return response.text();
      })
      .then(function (html) {
        if (holdReason()) return; // the reader started doing something while the page loaded
        var page = new DOMParser().parseFromString(html, "text/html");
        var fresh = page.getElementById("content");
        if (!fresh) return;
        content().innerHTML = fresh.innerHTML;
        document.title = page.title;
        localTimes(content());
        document.body.dataset.refreshedAt = String(Date.now());
      })
      .catch(function () { /* the server is restarting or unreachable: keep the page, try again later */ })
      .then(function () { busy = false; showState(); });
  }

  document.addEventListener("submit", function (event) {
    var form = event.target;
    var question = form.getAttribute("data-confirm");
    if (question && !window.confirm(question)) event.preventDefault();
  });

  document.addEventListener("change", function (event) {
    var form = event.target.form;
    if (form && form.hasAttribute("data-autosubmit") && event.target.tagName === "SELECT") form.submit();
  });

  document.addEventListener("click", function (event) {
    if (event.target.closest(".flash-close")) event.target.closest(".flash").remove();
  });

  if (toggle) {
    toggle.addEventListener("click", function () {
      try { window.localStorage.setItem(storageKey, paused() ? "on" : "off"); } catch (e) { /* private mode */ }
      showState();
      if (!paused()) refresh();
    });
  }

  document.addEventListener("toggle", showState, true); // <details> opened or closed
  document.addEventListener("selectionchange", showState);
  document.addEventListener("visibilitychange", function () { if (!document.hidden) refresh(); });

  localTimes(document);
  showState();
  if (seconds > 0) window.setInterval(refresh, seconds * 1000);
})();
