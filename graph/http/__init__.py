"""The HTTP routes mounted in the LangGraph server (langgraph.json http.app): thin layers over personalab.graph.api."""
