// hermes-meter's tab in Hermes's web dashboard: the viewer `hermes-meter ui`
// serves, in a frame. The plugin's backend (plugin_api.py) starts the viewer
// inside the dashboard process, on a free loopback port, and says
// where; this file only asks it and shows the answer.
(function () {
  "use strict";
  var SDK = window.__HERMES_PLUGIN_SDK__;
  if (!SDK || !window.__HERMES_PLUGINS__) { return; }
  var React = SDK.React;
  var h = React.createElement;

  function MeterPage() {
    var state = React.useState({ url: null, error: null });
    var view = state[0];
    var setView = state[1];
    React.useEffect(function () {
      var live = true;
      SDK.fetchJSON("/api/plugins/hermes-meter/viewer")
        .then(function (body) { if (live) { setView({ url: body.url, error: null }); } })
        .catch(function (e) { if (live) { setView({ url: null, error: String(e && e.message || e) }); } });
      return function () { live = false; };
    }, []);
    if (view.error) {
      return h("div", { className: "p-4", id: "hermes-meter-error" },
        "The hermes-meter viewer did not start: " + view.error);
    }
    if (!view.url) {
      return h("div", { className: "p-4" }, "Starting the hermes-meter viewer…");
    }
    return h("iframe", {
      id: "hermes-meter-viewer",
      title: "hermes-meter",
      src: view.url,
      style: { width: "100%", height: "calc(100vh - 96px)", border: "0" },
    });
  }

  window.__HERMES_PLUGINS__.register("hermes-meter", MeterPage);
})();
