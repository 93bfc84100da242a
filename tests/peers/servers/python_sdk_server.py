"""A small MCP server on the official Python SDK (mcp 2.x MCPServer), stdio."""
from pydantic import BaseModel
from mcp.server.mcpserver import MCPServer

app = MCPServer("switchyard-python-peer")

class Weather(BaseModel):
    city: str
    celsius: float

@app.tool()
def shout(text: str) -> str:
    """Upper-cases the text."""
    return text.upper()

@app.tool()
def weather(city: str) -> Weather:
    """Structured weather report."""
    return Weather(city=city, celsius=21.5)

if __name__ == "__main__":
    app.run()
