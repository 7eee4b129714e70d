"""The Runtime side of Claude Code: the live driver over stream-json (``live``), the process it
spawns (``process``) and the MCP bridge that relays public function calls (``mcp``). Claude
Code's pure knowledge (native encoding, the 64 bound, bridge protocol 3, classification) is
``shared.domain.harnesses.claude_code``."""
