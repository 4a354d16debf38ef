// The chat page `prism serve` answers at / (src/server/chat_page.html, built into the binary).
#pragma once

namespace prism {

const char* ChatPageHtml();

}  // namespace prism
