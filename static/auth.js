// The page's credential on a gateway with `auth_token` set: a short-lived browser token, never
// the server's own key. It comes from the URL fragment (`/#token=...`: a fragment is never sent
// to the server, not even in the page request) or the token field, and is kept in
// sessionStorage (this tab only, gone when it closes). Every request to /v1 carries it:
// fetch as `Authorization: Bearer`, the WebSocket as the subprotocols `token, <token>`.

const KEY = 'gatewayToken';

/** Take a token from the fragment (and drop it from the address bar), else the stored one. */
export function loadToken() {
  const params = new URLSearchParams(location.hash.slice(1));
  const fromHash = params.get('token');
  if (fromHash) {
    sessionStorage.setItem(KEY, fromHash);
    params.delete('token');
    const rest = params.toString();
    history.replaceState(null, '', location.pathname + location.search + (rest ? `#${rest}` : ''));
  }
  return token();
}

export function token() { return sessionStorage.getItem(KEY) || ''; }

export function setToken(value) {
  if (value) sessionStorage.setItem(KEY, value.trim());
  else sessionStorage.removeItem(KEY);
}

/** Headers for fetch: the token as a bearer token, when there is one. */
export function authHeaders() {
  const t = token();
  return t ? { Authorization: `Bearer ${t}` } : {};
}

/** The WebSocket's subprotocols: `token, <token>` (the server answers `token`), or none. */
export function wsProtocols() {
  const t = token();
  return t ? ['token', t] : [];
}
