// Interactive API docs (Swagger UI served by the app itself; no CDN). "Authorize" takes a bearer
// token from settings api.operators.
"use strict";
window.addEventListener("DOMContentLoaded", () => {
  window.ui = window.SwaggerUIBundle({
    url: "/openapi.json",
    dom_id: "#swagger-ui",
    deepLinking: true,
    persistAuthorization: false,
  });
});
