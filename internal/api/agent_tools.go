package api

import (
	"context"

	"github.com/sandgate/sandgate/internal/api/apigen"
	"github.com/sandgate/sandgate/internal/fault"
)

// GetAgentTools returns the MCP server's eight tools in the requested function-calling format,
// with the usage guidance for the caller (the profiles it may use).
func (s *Server) GetAgentTools(ctx context.Context, req apigen.GetAgentToolsRequestObject) (apigen.GetAgentToolsResponseObject, error) {
	p, err := caller(ctx)
	if err != nil {
		return nil, err
	}
	if s.tools == nil {
		return nil, fault.New(fault.NotFound, "the agent tools are not enabled on this gateway")
	}
	format := apigen.GetAgentToolsParamsFormatMcp
	if req.Params.Format != nil {
		format = *req.Params.Format
	}
	tools, err := s.tools.ToolDefinitions(p, string(format))
	if err != nil {
		return nil, fault.New(fault.Validation, "%s", err.Error())
	}
	return apigen.GetAgentTools200JSONResponse{
		Format: apigen.AgentToolsFormat(format), Guidance: s.tools.Guidance(p), ToolOutputMaxChars: s.tools.MaxChars(), Tools: tools,
	}, nil
}
