// Sign in with an API key: checked against the API (GET /jobs?limit=1), then kept for this
// tab only, or, when the user ticks "keep me signed in", in this browser (new tabs too).

import { api, setKey } from "../api.js";
import { h, problemBox } from "../ui.js";

export function renderSignIn(main, { onSignedIn }) {
  const input = h("input#api-key", { type: "password", name: "api_key", autocomplete: "off", required: true, spellcheck: "false", "aria-describedby": "api-key-help" });
  const status = h("div", { "aria-live": "polite" });
  const remember = h("input#remember", { type: "checkbox", name: "remember", "aria-describedby": "remember-help" });
  const button = h("button.primary", { type: "submit" }, "Sign in");
  const form = h("form.card.signin", {
    onsubmit: async (e) => {
      e.preventDefault();
      const key = input.value.trim();
      if (!key) return;
      button.disabled = true;
      status.replaceChildren(h("p.muted", {}, "Checking the key…"));
      try {
        await api("/jobs?limit=1", { key });
        setKey(key, { remember: remember.checked });
        onSignedIn();
      } catch (err) {
        status.replaceChildren(problemBox(err.status === 401
          ? Object.assign(err, { problem: { ...err.problem, title: "That API key was not accepted" } }) : err));
        button.disabled = false;
        input.focus();
      }
    },
  },
  h("h1", {}, "Sign in"),
  h("label", { for: "api-key" }, "API key"),
  input,
  h("p#api-key-help.muted", {}, "Create one with ", h("code", {}, "sodm create-key"),
    ". It is sent as a Bearer token."),
  h("div.checkbox", {}, remember, h("label", { for: "remember" }, "Keep me signed in on this browser")),
  h("p#remember-help.muted.small", {}, "Unticked, the key is forgotten when this tab closes. Ticked, it is kept in this browser's local storage (new tabs use it) until you sign out."),
  button, status);
  main.append(form);
  input.focus();
}
