# prism serve's chat page in a real headless browser (Debian's chromium through chromium-driver and
# selenium): the model picker fills from /v1/models, a message gets its streamed answer (the same text
# as the API's), and the stop button ends a long answer and frees the engine.
import os
import shutil
import time

import pytest

webdriver = pytest.importorskip("selenium.webdriver")
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.support.ui import WebDriverWait  # noqa: E402

from test_serve import PROMPT, Server, metric  # noqa: E402

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
DRIVER = shutil.which("chromedriver")


def open_page(prism_bin, *server_args):
    if not CHROMIUM or not DRIVER:
        pytest.skip("chromium and chromium-driver are not installed (apt install chromium chromium-driver)")
    s = Server(prism_bin, "--name", "stories", "--ctx", "256", *server_args)
    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    for arg in ["--headless=new", "--no-sandbox", "--disable-gpu", "--window-size=1000,800",
                "--disable-dev-shm-usage"]:
        opts.add_argument(arg)
    driver = webdriver.Chrome(service=webdriver.ChromeService(executable_path=DRIVER), options=opts)
    driver.set_page_load_timeout(30)
    driver.get(s.base + "/")
    return s, driver


@pytest.fixture
def page(prism_bin):
    s, driver = open_page(prism_bin)
    yield s, driver
    driver.quit()
    s.stop()


@pytest.fixture
def slow_page(prism_bin):
    # On the reference interpreter a 256-token answer takes long enough for a person to press stop.
    s, driver = open_page(prism_bin, "--device", "interp")
    yield s, driver
    driver.quit()
    s.stop()


def wait(driver, cond, seconds=60):
    return WebDriverWait(driver, seconds, poll_frequency=0.1).until(lambda d: cond(d))


def set_value(driver, element_id, value):
    driver.execute_script("document.getElementById(arguments[0]).value = arguments[1]", element_id, str(value))


def test_a_message_gets_its_streamed_answer(page, tmp_path):
    s, driver = page
    tmp = tmp_path
    wait(driver, lambda d: [o.text for o in d.find_elements(By.CSS_SELECTOR, "#model option")] == ["stories"])
    set_value(driver, "temperature", 0)
    set_value(driver, "max_tokens", 40)
    driver.find_element(By.ID, "input").send_keys(PROMPT)
    driver.find_element(By.ID, "send").click()
    answer = wait(driver, lambda d: d.find_element(By.CSS_SELECTOR, ".msg.assistant[data-done='1']"))
    driver.save_screenshot(str(tmp / "chat.png"))
    print(f"\nscreenshot: {tmp / 'chat.png'}")
    want = s.client().completions.create(model="stories", prompt=PROMPT, max_tokens=40, temperature=0)
    assert answer.text == want.choices[0].text
    assert driver.find_element(By.CSS_SELECTOR, ".msg.user").text == PROMPT
    assert driver.find_element(By.ID, "send").is_enabled()


def test_stop_ends_a_long_answer(slow_page):
    s, driver = slow_page
    wait(driver, lambda d: d.find_elements(By.CSS_SELECTOR, "#model option"))
    set_value(driver, "temperature", 0.8)
    set_value(driver, "max_tokens", 100000)  # the context's end: longer than the test waits
    driver.find_element(By.ID, "input").send_keys("Lily and Tom")
    driver.find_element(By.ID, "send").click()
    answers = lambda d: d.find_elements(By.CSS_SELECTOR, ".msg.assistant")  # noqa: E731
    wait(driver, lambda d: len(answers(d)) == 1 and len(answers(d)[-1].text) > 0)
    driver.find_element(By.ID, "stop").click()
    last = wait(driver, lambda d: d.find_element(By.CSS_SELECTOR, ".msg.assistant.stopped[data-done='1']"))
    assert last.text
    deadline = time.time() + 10
    while metric(s, "prism_requests_running") > 0:  # the server cancelled the abandoned stream
        assert time.time() < deadline
        time.sleep(0.1)
