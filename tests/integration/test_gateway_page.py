"""The gateway's page in Debian's headless chromium (driven by selenium through Debian's chromedriver): a photo
uploaded to each pipeline, its answer drawn, and the drawing checked against the API's own JSON for the same photo
(the boxes, their colour on the canvas, text lines, the mask, the classes). The face detector's drawn answer is the
screenshot in docs/images/gateway-page.png: rewritten here when the page looks otherwise, which then fails until the
new one is committed."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest
from PIL import Image
from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

from tests.integration.test_gateway import post
from vision_serving import layout

CHROMIUM, CHROMEDRIVER = Path("/usr/bin/chromium"), Path("/usr/bin/chromedriver")
SCREENSHOT = layout.REPOSITORY_ROOT / "docs" / "images" / "gateway-page.png"
FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking")
FLAGS += ("--disable-component-update", "--disable-sync", "--window-size=1500,900", "--hide-scrollbars", "--force-device-scale-factor=1")
BOX_COLOR = (0, 220, 0)
# How far a fresh screenshot may be from the committed one: this share of pixels off by more than 40 levels.
SCREENSHOT_TOLERANCE = 0.005


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    if not (CHROMIUM.exists() and CHROMEDRIVER.exists()):
        pytest.fail("Debian's chromium and chromium-driver are missing: scripts/system-packages.sh installs them")
    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for flag in (*FLAGS, f"--user-data-dir={tmp_path_factory.mktemp('chromium')}"):
        options.add_argument(flag)
    driver = webdriver.Chrome(options=options, service=Service(str(CHROMEDRIVER)))
    driver.set_page_load_timeout(60)
    yield driver
    driver.quit()


def upload(browser, gateway, pipeline: str, photo: Path) -> dict:
    """The page with ``pipeline`` chosen and ``photo`` picked; what it drew once it says so."""
    browser.get(f"{gateway.url}/?pipeline={pipeline}")
    WebDriverWait(browser, 30).until(lambda d: d.find_element(By.TAG_NAME, "body").get_attribute("data-state") == "ready")
    browser.find_element(By.ID, "file").send_keys(str(photo))
    WebDriverWait(browser, 120).until(lambda d: d.find_element(By.TAG_NAME, "body").get_attribute("data-state") in ("drawn", "error"))
    state = browser.find_element(By.TAG_NAME, "body").get_attribute("data-state")
    assert state == "drawn", browser.find_element(By.ID, "status").text
    return browser.execute_script("return window.drawing")


def canvas_pixel(browser, x: float, y: float) -> tuple[int, int, int]:
    return tuple(
        browser.execute_script(
            f"return Array.from(document.getElementById('canvas').getContext('2d').getImageData({int(x)}, {int(y)}, 1, 1).data.slice(0, 3))"
        )
    )


def photo_file(tmp_path, photo_bytes, name: str) -> Path:
    path = tmp_path / f"{name}.png"
    path.write_bytes(photo_bytes[name])
    return path


def test_detections_are_drawn_where_the_api_puts_them_and_the_screenshot_is_current(browser, gateway, photo_bytes, tmp_path):
    drawn = upload(browser, gateway, "face_detector", photo_file(tmp_path, photo_bytes, "astronaut"))
    _, answer = post(gateway, "face_detector", photo_bytes["astronaut"])
    boxes = [detection["box"] for detection in answer["detections"]]
    assert boxes and np.allclose(drawn["boxes"], boxes)
    assert drawn["keypoints"] == sum(len(d["keypoints"]) for d in answer["detections"])
    for x0, y0, x1, y1 in boxes:  # the box's colour on its left and right edges, halfway down
        for x in (x0, x1):
            assert canvas_pixel(browser, x, (y0 + y1) / 2) == pytest.approx(BOX_COLOR, abs=40)
    assert '"detections"' in browser.find_element(By.ID, "json").text
    keep_screenshot_current(browser, tmp_path)


def keep_screenshot_current(browser, tmp_path) -> None:
    fresh = tmp_path / "page.png"
    browser.save_screenshot(str(fresh))
    current = np.asarray(Image.open(fresh).convert("RGB"), dtype=np.int16)
    if SCREENSHOT.exists():
        committed = np.asarray(Image.open(SCREENSHOT).convert("RGB"), dtype=np.int16)
        if committed.shape == current.shape and np.mean(np.abs(committed - current).max(axis=-1) > 40) <= SCREENSHOT_TOLERANCE:
            return
    shutil.copyfile(fresh, SCREENSHOT)
    pytest.fail(f"the page looks otherwise now: {SCREENSHOT.relative_to(layout.REPOSITORY_ROOT)} rewritten, commit it")


def test_text_lines_masks_and_classes_are_drawn_as_answered(browser, gateway, photo_bytes, tmp_path):
    drawn = upload(browser, gateway, "text_reader", photo_file(tmp_path, photo_bytes, "page"))
    _, answer = post(gateway, "text_reader", photo_bytes["page"])
    assert answer["lines"] and np.allclose(drawn["polygons"], [line["corners"] for line in answer["lines"]])

    drawn = upload(browser, gateway, "person_segmenter", photo_file(tmp_path, photo_bytes, "astronaut"))
    assert drawn["masks"] == 1 and (drawn["width"], drawn["height"]) == (512, 512)

    drawn = upload(browser, gateway, "image_classifier", photo_file(tmp_path, photo_bytes, "chelsea"))
    _, answer = post(gateway, "image_classifier", photo_bytes["chelsea"])
    assert drawn["classes"] == [item["label"] for item in answer["classes"]]
    listed = [item.text.split("\n")[0] for item in browser.find_elements(By.CSS_SELECTOR, "#classes li")]
    assert len(listed) == len(answer["classes"]) and answer["classes"][0]["label"] in listed[0]
