package resp

import (
	"bytes"
	"fmt"
	"strconv"
	"strings"

	"github.com/tidwall/redcon"
)

// The commands that are not checks: what Redis clients send on connect
// and in pools. Replies follow Redis 7's texts where a client might read
// them.

// redisVersion is the Redis version HELLO and INFO claim: clients gate
// features on it (go-redis, redis-py read it), and 7.2 is what the
// commands here answer like.
const redisVersion = "7.2.0"

// command answers one non-check command; quit reports QUIT.
func (s *Server) command(c redcon.Conn, ss *session, args [][]byte) (quit bool) {
	name := strings.ToUpper(string(args[0]))
	if !ss.authed && name != "AUTH" && name != "HELLO" && name != "QUIT" {
		writeError(c, "NOAUTH Authentication required.")
		return false
	}
	switch name {
	case "PING":
		s.ping(c, ss, args)
	case "ECHO":
		if len(args) != 2 {
			wrongArity(c, args)
			return false
		}
		c.WriteBulk(args[1])
	case "QUIT":
		c.WriteString("OK")
		return true
	case "AUTH":
		s.auth(c, ss, args)
	case "HELLO":
		s.hello(c, ss, args)
	case "SELECT":
		selectDB(c, args)
	case "CLIENT":
		s.client(c, ss, args)
	case "COMMAND":
		command(c, ss, args)
	case "INFO":
		c.WriteBulkString(s.info())
	default:
		unknown(c, args)
	}
	return false
}

func (s *Server) ping(c redcon.Conn, ss *session, args [][]byte) {
	switch len(args) {
	case 1:
		c.WriteString("PONG")
	case 2:
		c.WriteBulk(args[1])
	default:
		wrongArity(c, args)
	}
}

// auth is AUTH password, or AUTH default password.
func (s *Server) auth(c redcon.Conn, ss *session, args [][]byte) {
	if len(args) != 2 && len(args) != 3 {
		wrongArity(c, args)
		return
	}
	if s.cfg.Password == "" {
		writeError(c, "ERR AUTH <password> called without any password configured for the default user. Are you sure your configuration is correct?")
		return
	}
	if s.login(c, ss, args[1:]) {
		c.WriteString("OK")
	}
}

// login checks [user] password and answers a refusal; true when it
// authenticated the session.
func (s *Server) login(c redcon.Conn, ss *session, cred [][]byte) bool {
	pw := cred[len(cred)-1]
	userOK := len(cred) == 1 || string(cred[0]) == "default"
	if s.checkPassword(pw) && userOK {
		ss.authed = true
		return true
	}
	if s.cfg.OnAuthFailure != nil {
		s.cfg.OnAuthFailure(c.RemoteAddr())
	}
	writeError(c, "WRONGPASS invalid username-password pair or user is disabled.")
	return false
}

// hello is HELLO [protover [AUTH user pass] [SETNAME name]].
func (s *Server) hello(c redcon.Conn, ss *session, args [][]byte) {
	proto := ss.proto
	if len(args) > 1 {
		v, err := strconv.Atoi(string(args[1]))
		if err != nil {
			writeError(c, "ERR Protocol version is not an integer or out of range")
			return
		}
		if v != 2 && v != 3 {
			writeError(c, "NOPROTO unsupported protocol version")
			return
		}
		proto = v
	}
	name, authArgs, msg := helloOptions(args)
	if msg != "" {
		writeError(c, msg)
		return
	}
	if authArgs != nil && !s.login(c, ss, authArgs) {
		return
	}
	if !ss.authed {
		writeError(c, "NOAUTH HELLO must be called with the client already authenticated, otherwise the HELLO <proto> AUTH <user> <pass> option can be used to authenticate the client and select the RESP protocol version at the same time")
		return
	}
	if name != nil {
		ss.name = string(name)
	}
	ss.proto = proto
	s.writeHello(c, ss)
}

func helloOptions(args [][]byte) (name []byte, auth [][]byte, msg string) {
	for i := 2; i < len(args); i++ {
		switch strings.ToUpper(string(args[i])) {
		case "AUTH":
			if i+2 >= len(args) {
				return nil, nil, "ERR Syntax error in HELLO option 'AUTH'"
			}
			auth, i = args[i+1:i+3], i+2
		case "SETNAME":
			if i+1 >= len(args) {
				return nil, nil, "ERR Syntax error in HELLO option 'SETNAME'"
			}
			name, i = args[i+1], i+1
		default:
			return nil, nil, fmt.Sprintf("ERR Syntax error in HELLO option '%s'", args[i])
		}
	}
	return name, auth, ""
}

// writeHello writes HELLO's map (an array of pairs under RESP2).
func (s *Server) writeHello(c redcon.Conn, ss *session) {
	writeMap(c, ss, 7)
	c.WriteBulkString("server")
	c.WriteBulkString("redis")
	c.WriteBulkString("version")
	c.WriteBulkString(redisVersion)
	c.WriteBulkString("proto")
	c.WriteInt(ss.proto)
	c.WriteBulkString("id")
	c.WriteInt64(ss.id)
	c.WriteBulkString("mode")
	c.WriteBulkString("standalone")
	c.WriteBulkString("role")
	c.WriteBulkString("master")
	c.WriteBulkString("modules")
	c.WriteArray(0)
}

// writeMap starts a map of n pairs: RESP3's '%', RESP2's flat array.
func writeMap(c redcon.Conn, ss *session, n int) {
	if ss.proto == 3 {
		c.WriteRaw([]byte("%" + strconv.Itoa(n) + "\r\n"))
		return
	}
	c.WriteArray(2 * n)
}

// writeNull writes RESP3's null or RESP2's null bulk.
func writeNull(c redcon.Conn, ss *session) {
	if ss.proto == 3 {
		c.WriteRaw([]byte("_\r\n"))
		return
	}
	c.WriteNull()
}

func selectDB(c redcon.Conn, args [][]byte) {
	if len(args) != 2 {
		wrongArity(c, args)
		return
	}
	n, err := strconv.Atoi(string(args[1]))
	switch {
	case err != nil:
		writeError(c, "ERR value is not an integer or out of range")
	case n != 0:
		writeError(c, "ERR DB index is out of range")
	default:
		c.WriteString("OK")
	}
}

// client is CLIENT SETNAME, GETNAME, SETINFO, ID.
func (s *Server) client(c redcon.Conn, ss *session, args [][]byte) {
	if len(args) < 2 {
		wrongArity(c, args)
		return
	}
	switch sub := strings.ToUpper(string(args[1])); {
	case sub == "SETNAME" && len(args) == 3:
		if bytes.ContainsAny(args[2], " \n") {
			writeError(c, "ERR Client names cannot contain spaces, newlines or special characters.")
			return
		}
		ss.name = string(args[2])
		c.WriteString("OK")
	case sub == "GETNAME" && len(args) == 2:
		if ss.name == "" {
			writeNull(c, ss)
			return
		}
		c.WriteBulkString(ss.name)
	case sub == "SETINFO" && len(args) == 4:
		c.WriteString("OK")
	case sub == "ID" && len(args) == 2:
		c.WriteInt64(ss.id)
	case sub == "SETNAME" || sub == "GETNAME" || sub == "SETINFO" || sub == "ID":
		writeError(c, fmt.Sprintf("ERR wrong number of arguments for 'client|%s' command", strings.ToLower(sub)))
	default:
		writeError(c, fmt.Sprintf("ERR unknown subcommand '%s'. Try CLIENT HELP.", args[1]))
	}
}

// command is COMMAND, COMMAND COUNT and COMMAND DOCS (redis-cli asks for
// the docs to draw hints): no command is described.
func command(c redcon.Conn, ss *session, args [][]byte) {
	if len(args) > 1 {
		switch strings.ToUpper(string(args[1])) {
		case "COUNT":
			c.WriteInt(len(callNames) + 10)
			return
		case "DOCS":
			writeMap(c, ss, 0)
			return
		}
	}
	c.WriteArray(0)
}

// info is INFO's text, whatever section is asked.
func (s *Server) info() string {
	var in Info
	if s.cfg.Info != nil {
		in = s.cfg.Info()
	}
	return fmt.Sprintf("# Server\r\nredis_version:%s\r\nredis_mode:standalone\r\nshardlimiter_version:%s\r\nnode:%s\r\n"+
		"\r\n# Clients\r\nconnected_clients:%d\r\n\r\n# Cluster\r\ncluster_enabled:0\r\nmembers:%d\r\n",
		redisVersion, in.Version, in.Node, s.conns.Load(), in.Members)
}

func wrongArity(c redcon.Conn, args [][]byte) {
	writeError(c, fmt.Sprintf("ERR wrong number of arguments for '%s' command", strings.ToLower(string(args[0]))))
}

// unknown is Redis' answer to a command it does not know.
func unknown(c redcon.Conn, args [][]byte) {
	var b strings.Builder
	fmt.Fprintf(&b, "ERR unknown command '%s', with args beginning with: ", clip(args[0]))
	for _, a := range args[1:min(len(args), 4)] {
		fmt.Fprintf(&b, "'%s' ", clip(a))
	}
	writeError(c, b.String())
}

// clip shortens an argument quoted in an error, as Redis does.
func clip(b []byte) []byte {
	if len(b) > 128 {
		return b[:128]
	}
	return b
}

// writeError writes an error reply; a client's bytes quoted in it lose
// their line breaks, which would end the reply early.
func writeError(c redcon.Conn, msg string) {
	if strings.ContainsAny(msg, "\r\n") {
		msg = strings.NewReplacer("\r", " ", "\n", " ").Replace(msg)
	}
	c.WriteError(msg)
}
