// The gateway's page: pick a pipeline, drop a photo, see the answer drawn over it and its JSON beside it.
// Plain JavaScript, no build step, nothing loaded from elsewhere. What it drew is kept in window.drawing
// (boxes, polygons, keypoints, masks, depth and class maps, classes, in the photo's pixels) and body[data-state] says where it is
// (loading, ready, sending, drawn, error): the browser test reads both.
"use strict";

const COLORS = { box: "#00dc00", rotated: "#ff8c00", line: "#ffc800", keypoint: "#ff4040", mask: [255, 64, 160] };
const MASK_OPACITY = 0.45;
const DEPTH_OPACITY = 0.6;
// Options the page sets itself, for what it draws: a depth map's float32 values (its 16-bit PNG reaches a canvas as 8 bits).
const PAGE_OPTIONS = { float_depth: "true" };
const $ = (id) => document.getElementById(id);
let pipelines = [];
let photo = null; // the File being shown

function setState(state, message) {
  document.body.dataset.state = state;
  $("status").textContent = message || "";
}

async function loadPipelines() {
  const response = await fetch("/v1/pipelines");
  const body = await response.json();
  if (!response.ok) throw new Error(body.error ? body.error.message : response.statusText);
  pipelines = body.pipelines;
  const select = $("pipeline");
  select.replaceChildren(...pipelines.map((p) => new Option(`${p.name} (${p.task})`, p.name)));
  const wanted = new URLSearchParams(location.search).get("pipeline");
  if (wanted && pipelines.some((p) => p.name === wanted)) select.value = wanted;
  showOptions();
  setState("ready", pipelines.length ? "Drop a photo." : "The server has no pipelines yet.");
}

function current() {
  return pipelines.find((p) => p.name === $("pipeline").value);
}

function showOptions() {
  const pipeline = current();
  const fields = [];
  for (const [name, schema] of Object.entries(pipeline ? pipeline.options : {})) {
    if (name in PAGE_OPTIONS) continue;
    const input = document.createElement("input");
    input.name = name;
    if (schema.type === "boolean") {
      input.type = "checkbox";
      input.value = "true";
      input.checked = schema.default === true;
    } else if (schema.type === "string") {
      input.type = "text";
      input.placeholder = schema.description || "";
    } else {
      input.type = "number";
      input.step = schema.type === "integer" ? "1" : "0.05";
      if (schema.minimum !== undefined) input.min = schema.minimum;
      if (schema.maximum !== undefined) input.max = schema.maximum;
      input.placeholder = schema.default !== undefined ? `default ${schema.default}` : "the model's default";
    }
    const label = document.createElement("label");
    label.append(name, input);
    fields.push(label);
  }
  $("options").replaceChildren(...fields);
}

async function send() {
  const pipeline = current();
  if (!photo || !pipeline) return;
  const form = new FormData();
  form.append("image", photo);
  for (const input of $("options").querySelectorAll("input")) {
    if (input.type === "checkbox") form.append(input.name, input.checked ? "true" : "false");
    else if (input.value !== "") form.append(input.name, input.value);
  }
  if (pipeline.choices.mask_format) form.append("mask_format", "png");
  for (const [name, value] of Object.entries(PAGE_OPTIONS)) if (name in pipeline.options) form.append(name, value);
  const headers = {};
  const key = $("api-key").value.trim();
  if (key) headers["X-API-Key"] = key;
  setState("sending", `Sending to ${pipeline.name}…`);
  const response = await fetch(pipeline.path, { method: "POST", body: form, headers });
  const answer = await response.json();
  $("json").textContent = JSON.stringify(answer, null, 2);
  if (!response.ok) {
    await drawPhoto();
    setState("error", `${response.status} ${answer.error.code}: ${answer.error.message}`);
    return;
  }
  await draw(answer);
  setState("drawn", `${pipeline.name}: ${summary(answer)}`);
}

function summary(answer) {
  const plural = (count, word) => `${count} ${word}${count === 1 ? "" : "s"}`;
  if (answer.detections) return plural(answer.detections.length, "detection");
  if (answer.lines) return plural(answer.lines.length, "line");
  if (answer.mask) return `the mask covers ${(100 * answer.coverage).toFixed(1)}%`;
  if (answer.depth) return `depth ${answer.depth.range[0].toFixed(2)} to ${answer.depth.range[1].toFixed(2)}`;
  if (answer.class_map) return `${answer.classes.length} classes, ${answer.classes[0] ? answer.classes[0].label : "none"} largest`;
  if (answer.classes) return `${answer.classes[0] ? answer.classes[0].label : "no class"} first`;
  return "answered";
}

function loadImage(source) {
  return new Promise((resolve, reject) => {
    const image = new Image();
    image.onload = () => resolve(image);
    image.onerror = () => reject(new Error("the browser cannot show this image"));
    image.src = source;
  });
}

let shown = null; // the decoded photo
async function drawPhoto() {
  const canvas = $("canvas");
  const url = URL.createObjectURL(photo);
  try {
    shown = await loadImage(url);
  } finally {
    URL.revokeObjectURL(url);
  }
  canvas.width = shown.naturalWidth;
  canvas.height = shown.naturalHeight;
  canvas.getContext("2d").drawImage(shown, 0, 0);
  $("classes").replaceChildren();
  window.drawing = { width: canvas.width, height: canvas.height, boxes: [], polygons: [], keypoints: 0, masks: 0, depth: null, classMap: null, classes: [] };
}

async function draw(answer) {
  await drawPhoto();
  const context = $("canvas").getContext("2d");
  const width = Math.max(2, Math.round(Math.max(context.canvas.width, context.canvas.height) / 300));
  if (answer.mask) await drawMask(context, answer.mask, [0, 0]);
  if (answer.depth) await drawDepth(context, answer.depth);
  if (answer.class_map) await drawClassMap(context, answer.class_map);
  for (const detection of answer.detections || []) await drawDetection(context, detection, width);
  (answer.lines || []).forEach((line, index) => drawPolygon(context, line.corners, COLORS.line, width, String(index + 1)));
  if (answer.classes) showClasses(answer.classes);
}

async function drawDetection(context, detection, width) {
  if (detection.mask) await drawMask(context, detection.mask, detection.mask.box.slice(0, 2));
  const [x0, y0, x1, y1] = detection.box;
  context.lineWidth = width;
  context.strokeStyle = COLORS.box;
  context.strokeRect(x0, y0, x1 - x0, y1 - y0);
  caption(context, `${detection.label} ${detection.score.toFixed(2)}`, x0, y0, COLORS.box, width);
  window.drawing.boxes.push([x0, y0, x1, y1]);
  for (const [x, y, score] of detection.keypoints || []) {
    if (score !== undefined && score < 0.5) continue;
    context.fillStyle = COLORS.keypoint;
    context.beginPath();
    context.arc(x, y, 1.5 * width, 0, 2 * Math.PI);
    context.fill();
    window.drawing.keypoints += 1;
  }
  if (detection.rotated_box) drawPolygon(context, detection.rotated_box.corners, COLORS.rotated, width, "");
}

function drawPolygon(context, corners, color, width, label) {
  context.lineWidth = width;
  context.strokeStyle = color;
  context.beginPath();
  corners.forEach(([x, y], index) => (index ? context.lineTo(x, y) : context.moveTo(x, y)));
  context.closePath();
  context.stroke();
  if (label) caption(context, label, corners[0][0], corners[0][1], color, width);
  window.drawing.polygons.push(corners);
}

function caption(context, text, x, y, color, width) {
  const size = 6 * width + 4;
  context.font = `${size}px sans-serif`;
  const textWidth = context.measureText(text).width;
  const top = Math.max(0, y - size - 4);
  context.fillStyle = color;
  context.fillRect(x, top, textWidth + 6, size + 4);
  context.fillStyle = "#000";
  context.fillText(text, x + 3, top + size);
}

async function drawMask(context, mask, [left, top]) {
  if (!mask.png) return; // RLE is for programs; the page asks for PNG
  const image = await loadImage(`data:image/png;base64,${mask.png}`);
  const layer = document.createElement("canvas");
  layer.width = image.naturalWidth;
  layer.height = image.naturalHeight;
  const paint = layer.getContext("2d");
  paint.drawImage(image, 0, 0);
  const pixels = paint.getImageData(0, 0, layer.width, layer.height);
  const [r, g, b] = COLORS.mask;
  for (let i = 0; i < pixels.data.length; i += 4) {
    const alpha = pixels.data[i] / 255;
    pixels.data[i] = r;
    pixels.data[i + 1] = g;
    pixels.data[i + 2] = b;
    pixels.data[i + 3] = Math.round(alpha * MASK_OPACITY * 255);
  }
  paint.putImageData(pixels, 0, 0);
  context.drawImage(layer, left, top);
  window.drawing.masks += 1;
}

// A depth map over the photo: near red through green to far blue, from its float32 values (else its PNG's 8 bits).
async function drawDepth(context, depth) {
  const layer = document.createElement("canvas");
  layer.width = depth.width;
  layer.height = depth.height;
  const paint = layer.getContext("2d");
  let values;
  if (depth.float32) {
    const bytes = Uint8Array.from(atob(depth.float32), (c) => c.charCodeAt(0));
    values = new Float32Array(bytes.buffer);
  } else {
    paint.drawImage(await loadImage(`data:image/png;base64,${depth.png}`), 0, 0);
    const gray = paint.getImageData(0, 0, layer.width, layer.height).data;
    values = Float32Array.from({ length: layer.width * layer.height }, (_, i) => gray[4 * i]);
  }
  let low = Infinity;
  let high = -Infinity;
  for (const value of values) {
    low = Math.min(low, value);
    high = Math.max(high, value);
  }
  const pixels = paint.createImageData(layer.width, layer.height);
  for (let i = 0; i < values.length; i += 1) {
    const far = high > low ? (values[i] - low) / (high - low) : 0;
    const [r, g, b] = hue(240 * far);
    pixels.data.set([r, g, b, Math.round(DEPTH_OPACITY * 255)], 4 * i);
  }
  paint.putImageData(pixels, 0, 0);
  context.drawImage(layer, 0, 0);
  window.drawing.depth = { width: layer.width, height: layer.height, low, high };
}

// A class map over the photo: every class but 0 (the background, by Ultralytics' convention) tinted its own hue.
async function drawClassMap(context, classMap) {
  const layer = document.createElement("canvas");
  layer.width = classMap.width;
  layer.height = classMap.height;
  const paint = layer.getContext("2d");
  paint.drawImage(await loadImage(`data:image/png;base64,${classMap.png}`), 0, 0);
  const pixels = paint.getImageData(0, 0, layer.width, layer.height);
  const tinted = new Set();
  for (let i = 0; i < pixels.data.length; i += 4) {
    const id = pixels.data[i];
    if (id === 0) {
      pixels.data[i + 3] = 0;
      continue;
    }
    tinted.add(id);
    pixels.data.set([...hue((id * 94) % 360), Math.round(MASK_OPACITY * 255)], i);
  }
  paint.putImageData(pixels, 0, 0);
  context.drawImage(layer, 0, 0);
  window.drawing.classMap = { width: layer.width, height: layer.height, tinted: [...tinted].sort((a, b) => a - b) };
}

function hue(degrees) {
  const channel = (n) => {
    const k = (n + degrees / 60) % 6;
    return Math.round(255 * (1 - Math.max(0, Math.min(k, 4 - k, 1))));
  };
  return [channel(5), channel(3), channel(1)];
}

function showClasses(classes) {
  $("classes").replaceChildren(
    ...classes.map((item) => {
      const entry = document.createElement("li");
      const score = document.createElement("span");
      score.className = "score";
      score.textContent = `${(100 * (item.score ?? item.share)).toFixed(1)}%`;
      entry.append(item.label, score);
      return entry;
    }),
  );
  window.drawing.classes = classes.map((item) => item.label);
}

function choose(file) {
  if (!file) return;
  photo = file;
  send().catch((error) => setState("error", error.message));
}

window.addEventListener("DOMContentLoaded", () => {
  const drop = $("drop");
  $("file").addEventListener("change", (event) => choose(event.target.files[0]));
  $("pipeline").addEventListener("change", () => {
    showOptions();
    send().catch((error) => setState("error", error.message));
  });
  drop.addEventListener("dragover", (event) => {
    event.preventDefault();
    drop.classList.add("over");
  });
  drop.addEventListener("dragleave", () => drop.classList.remove("over"));
  drop.addEventListener("drop", (event) => {
    event.preventDefault();
    drop.classList.remove("over");
    choose(event.dataTransfer.files[0]);
  });
  loadPipelines().catch((error) => setState("error", `Cannot list the pipelines: ${error.message}`));
});
