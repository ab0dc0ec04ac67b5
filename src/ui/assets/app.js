// hermes-meter viewer: keeps the page current while Hermes runs. It asks the
// server for the store's data version every two seconds and, when it moved,
// fetches this page again and swaps in its <main>, keeping open <details>.
(function () {
  "use strict";
  var POLL_MS = 2000;
  var meta = document.querySelector('meta[name="hermes-meter-version"]');
  var version = meta ? meta.getAttribute("content") : null;
  var live = document.getElementById("live");
  var base = document.body.getAttribute("data-base") || "";

  function say(text) {
    if (live) { live.textContent = text; }
  }

  // Whether the page is wider than the window (it never should be: wide
  // tables scroll in their own box); the browser tests read this mark.
  function markOverflow() {
    var root = document.documentElement;
    root.setAttribute("data-overflows", String(root.scrollWidth > root.clientWidth));
  }

  function openDetails() {
    var open = [];
    document.querySelectorAll("details[open][id]").forEach(function (d) { open.push(d.id); });
    return open;
  }

  function refresh() {
    return fetch(location.href, { credentials: "same-origin", cache: "no-store" })
      .then(function (r) { return r.ok ? r.text() : null; })
      .then(function (text) {
        if (text === null) { return; }
        var doc = new DOMParser().parseFromString(text, "text/html");
        var fresh = doc.querySelector("main");
        var current = document.querySelector("main");
        if (!fresh || !current) { return; }
        var keep = openDetails();
        current.replaceWith(document.importNode(fresh, true));
        keep.forEach(function (id) {
          var d = document.getElementById(id);
          if (d) { d.open = true; }
        });
        markOverflow();
      });
  }

  function poll() {
    fetch(base + "/api/version", { credentials: "same-origin", cache: "no-store" })
      .then(function (r) {
        if (!r.ok) { throw new Error("status " + r.status); }
        return r.json();
      })
      .then(function (body) {
        var v = String(body.version);
        var changed = version !== null && v !== version;
        version = v;
        say("live");
        return changed ? refresh() : null;
      })
      .catch(function () { say("not reachable; retrying"); })
      .then(function () { setTimeout(poll, POLL_MS); });
  }

  say("live");
  markOverflow();
  setTimeout(poll, POLL_MS);
})();
