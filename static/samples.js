// Texts the "Sample" menu puts in the text box. The plain one is the box's own initial text
// (index.html); the agent-style reply is what an LLM writes: markdown, emoji, a link, a phone
// number, prices and a range, which the gateway's text front-end cleans before speech.

export const SAMPLES = {
  agent: "**Sure!** Here's your order summary 🎉\n\n"
    + '1. *Pasta* with garlic — $12.50\n2. Tacos (spicy)\n\n'
    + '### Next steps\nCall us at (555) 123-4567 or see [the docs](https://example.com/docs/start). '
    + 'Delivery takes 5-10 minutes 😊',
};
