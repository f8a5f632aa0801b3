// Swagger UI on the gateway's own OpenAPI document (its files come from the pinned swagger-ui-py wheel).
"use strict";
window.ui = SwaggerUIBundle({ url: "/openapi.json", dom_id: "#swagger-ui", deepLinking: true, tryItOutEnabled: true });
